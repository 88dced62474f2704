"""The seams the vLLM plugin patches, checked from each supported release's source without importing vLLM.

Unit part: the checker finds each kind of moved seam in small synthetic trees, and the manifest covers every
method `_vllm_patches.py` wraps. Release part (marker `vllm`, run by scripts/ci_vllm.sh): the wheel of every
release in SUPPORTED_VLLM is downloaded with `pip download --no-deps` (cached under ADAPTSPEC_VLLM_WHEELS,
default `.cache/vllm-wheels` in the checkout) and must match the manifest exactly.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from adaptspec.integrations import vllm_plugin, vllm_seams
from adaptspec.integrations.vllm_seams import Attribute, Method, check_sources, check_wheel

ROOT = Path(__file__).resolve().parents[2]

GOOD = {
    "pkg/sched.py": (
        "class Scheduler:\n"
        "    budget: int = 0\n"
        "    def __init__(self, config):\n"
        "        self.requests = {}\n"
        "    def update(self, draft_token_ids, extra=None):\n"
        "        pass\n"
        "    @property\n"
        "    def load(self):\n"
        "        return 0\n"
        "class Error(Exception):\n"
        "    def __init__(self, message, *, parameter=None):\n"
        "        pass\n"
    ),
}
SEAMS = (
    Method("pkg/sched.py", "Scheduler", "update", ("self", "draft_token_ids")),
    Attribute("pkg/sched.py", "Scheduler", "requests"),
    Attribute("pkg/sched.py", "Scheduler", "budget"),
    Attribute("pkg/sched.py", "Scheduler", "load"),
    Method("pkg/sched.py", "Error", "__init__", ("self", "message"), kwonly=("parameter",)),
)


def check(files: dict[str, str], seams=SEAMS) -> list[str]:
    return check_sources(files.get, seams)


def edited(old: str, new: str) -> dict[str, str]:
    text = GOOD["pkg/sched.py"]
    assert old in text
    return {"pkg/sched.py": text.replace(old, new)}


def test_matching_tree_has_no_problems():
    assert check(GOOD) == []


@pytest.mark.parametrize("old, new, problem", [
    ("def update(self, draft_token_ids", "def update_drafts(self, draft_token_ids",
     "Scheduler.update: method not defined"),
    ("def update(self, draft_token_ids", "def update(self, drafts", "the patch expects them to start with"),
    ("self.requests = {}", "self.reqs = {}", "Scheduler.requests: attribute never assigned"),
    ("    budget: int = 0\n", "", "Scheduler.budget: attribute never assigned"),
    ("def __init__(self, message, *, parameter=None)", "def __init__(self, message, *, param=None)",
     "no parameter 'parameter'"),
    ("class Scheduler:", "class Planner:", "class Scheduler not found"),
])
def test_each_kind_of_moved_seam_is_reported(old, new, problem):
    problems = check(edited(old, new))
    assert len(problems) >= 1 and any(problem in p for p in problems), problems


def test_missing_file_is_reported():
    assert check({}) == ["pkg/sched.py: file not found"]


def test_manifest_covers_every_patched_method():
    """Every `_seam(Class, "name")` in the patches has a Method in SEAMS (and nothing in SEAMS is stale)."""
    tree = ast.parse((ROOT / "adaptspec/integrations/_vllm_patches.py").read_text())
    patched = {(call.args[0].id, call.args[1].value) for call in ast.walk(tree)
               if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "_seam"}
    listed = {(s.cls, s.name) for s in vllm_seams.SEAMS if isinstance(s, Method)}
    assert patched and patched <= listed, sorted(patched - listed)


def test_every_supported_release_has_a_checked_wheel():
    assert set(vllm_plugin.CHECKED_RELEASES) == set(vllm_plugin.SUPPORTED_VLLM)
    for minor, release in vllm_plugin.CHECKED_RELEASES.items():
        assert release.startswith(minor + ".")


def test_cli_reports_a_moved_seam(tmp_path):
    """`python -m adaptspec.integrations.vllm_seams WHEEL` exits 1 and names the seam."""
    wheel = tmp_path / "vllm-9.9.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(vllm_seams.SCHEDULER, "class Scheduler:\n    pass\n")
    assert wheel_problems(wheel)
    out = subprocess.run([sys.executable, "-m", "adaptspec.integrations.vllm_seams", str(wheel)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "Scheduler.update_draft_token_ids: method not defined" in out.stdout
    assert vllm_seams.wheel_version(wheel) == "9.9.0"


def wheel_problems(wheel: Path) -> list[str]:
    return check_wheel(wheel)


def _wheel_dir() -> Path:
    return Path(os.environ.get("ADAPTSPEC_VLLM_WHEELS", ROOT / ".cache" / "vllm-wheels"))


def _download(release: str) -> Path:
    cache = _wheel_dir()
    found = sorted(cache.glob(f"vllm-{release}-*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        out = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              "-d", str(cache), f"vllm=={release}"], capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, f"pip download vllm=={release} failed:\n{out.stderr[-3000:]}"
        found = sorted(cache.glob(f"vllm-{release}-*.whl"))
    assert found, f"no wheel of vllm {release} in {cache}"
    return found[0]


@pytest.mark.vllm
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("release", sorted(vllm_plugin.CHECKED_RELEASES.values()))
def test_supported_release_matches_the_patched_seams(release):
    wheel = _download(release)
    assert vllm_seams.wheel_version(wheel) == release
    assert check_wheel(wheel) == [], f"vLLM {release} moved seams the plugin patches"
