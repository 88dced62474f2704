"""The vLLM plugin's pure parts (no vLLM needed): version guard, vllm_xargs validation and parsing."""

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from adaptspec.integrations import vllm_plugin as plugin

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version", ["0.32.0", "0.32.1", "0.32.0rc2", "0.33.0", "0.33.2"])
def test_supported_versions_pass(version):
    plugin.check_version(version)


@pytest.mark.parametrize("version", ["0.31.2", "0.34.0", "1.0.0", "dev"])
def test_unsupported_versions_fail_loudly(version):
    with pytest.raises(plugin.UnsupportedVLLMError, match=f"found {version}"):
        plugin.check_version(version)


def test_register_refuses_an_unsupported_vllm(tmp_path):
    # a real module named vllm with another version, first on the path of a fresh interpreter
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("__version__ = '0.99.0'\n")
    code = "from adaptspec.integrations.vllm_plugin import register; register()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0
    assert "UnsupportedVLLMError" in proc.stderr and "found 0.99.0" in proc.stderr


def test_entry_point_names_register():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    target = meta["project"]["entry-points"]["vllm.general_plugins"]["adaptspec"]
    module, _, attr = target.partition(":")
    assert (module, attr) == ("adaptspec.integrations.vllm_plugin", "register")
    assert callable(getattr(plugin, attr))


@pytest.mark.parametrize(("xargs", "limit"), [
    (None, None),
    ({}, None),
    ({"adaptspec_num_spec_tokens": 0}, 0),
    ({"adaptspec_num_spec_tokens": 3}, 3),
    ({"adaptspec_num_spec_tokens": 2.0}, 2),
    ({"adaptspec_proposer": "none", "adaptspec_num_spec_tokens": 4}, 0),
    ({"adaptspec_proposer": "ngram"}, None),
    ({"kv_transfer_params": {}}, None),
])
def test_request_limit(xargs, limit):
    assert plugin.request_limit(xargs) == limit


@pytest.mark.parametrize("bad", [
    {"adaptspec_num_spec_tokens": -1},
    {"adaptspec_num_spec_tokens": 1.5},
    {"adaptspec_num_spec_tokens": "3"},
    {"adaptspec_num_spec_tokens": True},
    {"adaptspec_proposer": 3},
    {"adaptspec_content_class": ["code"]},
])
def test_bad_xargs_are_rejected_naming_the_field(bad):
    with pytest.raises(ValueError, match=f"vllm_xargs.{next(iter(bad))}"):
        plugin.validate_xargs(bad)


def test_good_xargs_pass():
    plugin.validate_xargs({"adaptspec_num_spec_tokens": 4, "adaptspec_proposer": "ngram",
                           "adaptspec_content_class": "code", "other": [1, 2]})
    plugin.validate_xargs(None)


def test_labels(monkeypatch):
    monkeypatch.delenv(plugin.ENV_PROPOSER, raising=False)
    assert plugin.request_labels(None) == ("unknown", "unknown")
    assert plugin.request_labels({"adaptspec_content_class": "math", "adaptspec_proposer": "draft"}) == ("math", "draft")
    monkeypatch.setenv(plugin.ENV_PROPOSER, "ngram")
    assert plugin.request_labels({"adaptspec_content_class": "code"}) == ("code", "ngram")
    # a client that talks to vLLM directly cannot mint label values (one series each)
    for i in range(3):
        assert plugin.request_labels({"adaptspec_content_class": f"x{i}", "adaptspec_proposer": f"p{i}"}) == (
            "unknown", "unknown")


@pytest.mark.parametrize(("text", "want"), [(None, None), ("", None), ("  ", None), ("2:4:4", (2, 4, 4)),
                                            ("1:1:8", (1, 1, 8)), (" 3:5:2 ", (3, 5, 2))])
def test_shadow_config(text, want):
    assert plugin.shadow_config(text) == want


@pytest.mark.parametrize("text", ["2:4", "a:b:c", "4:2:4", "0:2:4", "2:4:0", "2:4:65", "2:4:4:4"])
def test_bad_shadow_config_names_the_variable(text):
    with pytest.raises(ValueError, match=plugin.ENV_SHADOW):
        plugin.shadow_config(text)


@pytest.mark.parametrize(("method", "label"), [("ngram", "ngram"), ("suffix", "ngram"), ("draft_model", "draft"),
                                               ("eagle", "eagle"), ("eagle3", "eagle"), ("mtp", "eagle"),
                                               ("deepseek_mtp", "eagle"), (None, "hybrid"), ("odd", "hybrid")])
def test_speculative_method_to_telemetry_label(method, label):
    assert plugin.telemetry_proposer(method) == label


def test_step_window_round_trip_through_the_stats_dict():
    stats = {"waiting_for_remote_kvs": 2}  # vLLM's own entries stay
    window = {"steps": 7, "seconds": 0.1234567, "batched": 90, "kv": 4000, "requests": 20, "drafted": 12, "passes": 4,
              "calls": 2}
    stats.update(plugin.encode_step_window(window, "draft"))
    assert all(isinstance(v, int) for v in stats.values())  # the field is dict[str, int] on the wire
    got = plugin.pop_step_window(stats)
    assert stats == {"waiting_for_remote_kvs": 2}
    assert got == {"steps": 7, "seconds": pytest.approx(0.123457, abs=1e-6), "batched": 90, "kv": 4000,
                   "requests": 20, "drafted": {"draft": 12}, "passes": {"draft": 4}, "calls": {"draft": 2}}
    assert plugin.pop_step_window(stats) is None
    no_drafts = plugin.encode_step_window({**window, "drafted": 0, "passes": 0}, "ngram")
    assert plugin.pop_step_window(dict(no_drafts))["drafted"] == {}
