"""The SGLang names the adapter relies on, checked from the pinned release's wheel without importing SGLang.

Unit part: the checker reports each kind of drift (a renamed gauge or counter, a renamed / CLI-less / aliased
flag, a missing algorithm) in small synthetic trees built from the names adaptspec uses. Release part (marker
`sglang`, a step of .ci/run): the wheel of `PINNED_SGLANG` is downloaded with `pip download --no-deps` (cached
under ADAPTSPEC_SGLANG_WHEELS, default `.cache/sglang-wheels` in the checkout) and must have every metric the
proxy scrapes and every flag `adaptspec launch sglang` writes. It fails, never skips, when it cannot get the wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from adaptspec.integrations import sglang_seams
from adaptspec.integrations.sglang import PINNED_SGLANG, VALID_ALGORITHMS
from adaptspec.integrations.sglang_seams import FIELDS, OBSERVABILITY, SERVER_ARGS, SPEC_INFO, check_sources

ROOT = Path(__file__).resolve().parents[2]


def tree() -> dict[str, str]:
    """A release that has exactly what adaptspec uses, in the shapes SGLang 0.5.23 writes it."""
    metrics = []
    for name in sglang_seams.scraped_metrics().values():
        if name.endswith(("_tokens", "_calls")):  # counters are registered with their _total
            metrics.append(f'        self.c_{len(metrics)} = Counter(name="{name}_total", documentation="x")')
        else:
            metrics.append(f'        self.g_{len(metrics)} = Gauge(\n            name="{name}",\n        )')
    collector = "class Collector:\n    def __init__(self):\n" + "\n".join(metrics) + "\n"
    fields = ["class Spec(msgspec.Struct):"]
    for flag in sorted(sglang_seams.launch_flags() - {"--model-path", "--host"}):
        fields.append(f'    {flag[2:].replace("-", "_")}: A[Optional[str], "help"] = None')
    fields.append('    model: A[str, Arg(help="weights", aliases=["--model-path"])] = ""')
    fields.append('    internal: A[int, Arg(no_cli=True)] = 0')
    members = "\n".join(f"    {a} = auto()" for a in VALID_ALGORITHMS)
    return {
        OBSERVABILITY + "metrics_collector.py": collector,
        FIELDS + "spec.py": "\n".join(fields) + "\n",
        SERVER_ARGS: 'def add(parser):\n    parser.add_argument(\n        "--host", type=str)\n',
        SPEC_INFO: f"class SpeculativeAlgorithm(IntEnum):\n{members}\n    NONE = auto()\n",
    }


def test_a_matching_release_has_no_problems():
    assert check_sources(tree()) == []


@pytest.mark.parametrize("old, new, problem", [
    ('name="sglang:num_running_reqs"', 'name="sglang:num_running_requests"', "metric sglang:num_running_reqs"),
    ('name="sglang:spec_accept_rate"', 'name="sglang:spec_acceptance_rate"', "metric sglang:spec_accept_rate"),
    ('name="sglang:generation_tokens_total"', 'name="sglang:gen_tokens_total"', "metric sglang:generation_tokens"),
    ('name="sglang:spec_verify_calls_total"', 'name="sglang:verify_calls_total"', "metric sglang:spec_verify_calls"),
])
def test_a_renamed_metric_is_reported(old, new, problem):
    files = tree()
    path = OBSERVABILITY + "metrics_collector.py"
    assert old in files[path]
    files[path] = files[path].replace(old, new)
    assert any(p.startswith(problem) for p in check_sources(files)), check_sources(files)


@pytest.mark.parametrize("old, new, problem", [
    ("speculative_num_steps:", "speculative_depth:", "launch flag --speculative-num-steps"),
    ('aliases=["--model-path"]', 'aliases=["--model-dir"]', "launch flag --model-path"),
    ("enable_metrics: A[Optional[str], \"help\"]", "enable_metrics: A[Optional[str], Arg(no_cli=True)]",
     "launch flag --enable-metrics"),
])
def test_a_renamed_or_hidden_flag_is_reported(old, new, problem):
    files = tree()
    path = FIELDS + "spec.py"
    assert old in files[path]
    files[path] = files[path].replace(old, new)
    assert any(p.startswith(problem) for p in check_sources(files)), check_sources(files)


def test_a_flag_added_by_hand_counts_and_a_dropped_one_is_reported():
    files = tree()
    files[SERVER_ARGS] = files[SERVER_ARGS].replace('"--host"', '"--bind"')
    assert check_sources(files) == ["launch flag --host: no such sglang.launch_server argument"]


def test_a_dropped_algorithm_is_reported():
    files = tree()
    files[SPEC_INFO] = files[SPEC_INFO].replace("    STANDALONE = auto()\n", "")
    assert [p for p in check_sources(files) if "STANDALONE" in p]


def test_every_scraped_sglang_name_is_checked():
    """The metric manifest is metric_names itself: the speculative counters the adapter ingests are in it."""
    names = set(sglang_seams.scraped_metrics().values())
    assert {"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:spec_accept_length",
            "sglang:spec_accept_rate", "sglang:spec_num_steps", "sglang:spec_verify_calls"} <= names


def test_cli_exits_1_and_names_the_problem(tmp_path):
    files = tree()
    path = OBSERVABILITY + "metrics_collector.py"
    files[path] = files[path].replace('"sglang:token_usage"', '"sglang:kv_usage"')
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    out = subprocess.run([sys.executable, "-m", "adaptspec.integrations.sglang_seams", str(wheel)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "metric sglang:token_usage" in out.stdout
    assert sglang_seams.wheel_version(wheel) == "9.9.9"


def _download(release: str) -> Path:
    cache = Path(os.environ.get("ADAPTSPEC_SGLANG_WHEELS", ROOT / ".cache" / "sglang-wheels"))
    found = sorted(cache.glob(f"sglang-{release}-*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        out = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              "-d", str(cache), f"sglang=={release}"], capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, f"pip download sglang=={release} failed:\n{out.stderr[-3000:]}"
        found = sorted(cache.glob(f"sglang-{release}-*.whl"))
    assert found, f"no wheel of sglang {release} in {cache}"
    return found[0]


@pytest.mark.sglang
@pytest.mark.timeout(1200)
def test_pinned_release_has_every_name_the_adapter_uses():
    wheel = _download(PINNED_SGLANG)
    assert sglang_seams.wheel_version(wheel) == PINNED_SGLANG
    assert check_sources(sglang_seams.wheel_sources(wheel)) == [], f"SGLang {PINNED_SGLANG} moved names adaptspec uses"
