"""Issue 33's limits on the repository, read from the tracked files: a README a newcomer reads in ten minutes
(<= 300 lines), docs/ under 5 MB, no tracked file over 500 KB but the tiny models the tests and the embedded
worker run, and every measurement program under benchmarks/ (scripts/ trains models and runs CI)."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the repo's tiny target / draft / EAGLE pair (adaptspec/assets): the package's embedded worker and the tests
# load them; nothing else this size is tracked
ASSET_WEIGHTS = {f"adaptspec/assets/tiny-{m}/model.safetensors" for m in ("target", "draft", "eagle")}
# programs outside benchmarks/ that measure nothing: training, CI, generated config
NOT_MEASUREMENT = {"scripts/train_classifier.py", "scripts/train_eagle_head.py", "scripts/train_tiny_models.py",
                   "scripts/ci_vllm.sh", "scripts/test.sh", "dashboards/generate.py", "deploy/k8s/dashboards.py"}


@pytest.fixture(scope="module")
def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [f for f in out.stdout.split("\0") if f and (ROOT / f).is_file()]


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_docs_are_under_5_mb(tracked):
    assert sum((ROOT / f).stat().st_size for f in tracked if f.startswith("docs/")) < 5_000_000


def test_no_tracked_file_is_over_500_kb(tracked):
    big = [f"{f}: {(ROOT / f).stat().st_size} bytes" for f in tracked
           if (ROOT / f).stat().st_size > 500_000 and f not in ASSET_WEIGHTS]
    assert big == []


def test_measurement_programs_live_under_benchmarks(tracked):
    programs = [f for f in tracked if f.endswith((".py", ".sh", ".ipynb"))
                and not f.startswith(("adaptspec/", "tests/", "benchmarks/")) and f not in NOT_MEASUREMENT]
    assert programs == []
