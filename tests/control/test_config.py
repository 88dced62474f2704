from pathlib import Path

import pytest

from adaptspec.control.config import (
    BanditPolicy,
    Config,
    GoodputPolicy,
    StaticPolicy,
    ThresholdPolicy,
    load_config,
    parse_config,
)
from adaptspec.errors import ConfigError

POLICIES = sorted((Path(__file__).parents[2] / "policies").glob("*.yaml"))
W = [{"name": "w0", "url": "http://127.0.0.1:8001"}]


def test_shipped_policies_are_valid():
    names = {p.name for p in POLICIES}
    assert {"default.yaml", "static-off.yaml", "static-ngram.yaml", "static-draft.yaml", "threshold.yaml",
            "bandit.yaml"} <= names
    kinds = {p.name: type(load_config(p).policy) for p in POLICIES}
    assert kinds["default.yaml"] is GoodputPolicy and kinds["bandit.yaml"] is BanditPolicy
    assert kinds["threshold.yaml"] is ThresholdPolicy and kinds["static-off.yaml"] is StaticPolicy


def test_empty_file_is_the_default_config(tmp_path):
    f = tmp_path / "empty.yaml"
    f.write_text("")
    cfg = load_config(f)
    assert cfg == Config() and cfg.pools == [] and cfg.policy.kind == "goodput"
    assert cfg.server.scrape_interval_s == 0.25 and cfg.state.backend == "memory"


def test_pool_fields_as_in_interfaces():
    cfg = parse_config({"pools": [{"name": "spec", "engine": "vllm", "per_request": False, "proposers": ["ngram"],
                                   "gamma": 4, "max_gamma": 8, "profile": "h100-llama3-8b", "models": ["m"],
                                   "workers": [{"name": "w0", "url": "http://h:1", "api_key_env": "K"}],
                                   "launch": {"x": 1}}]})
    p = cfg.pools[0]
    assert (p.engine, p.per_request, p.proposers, p.gamma, p.profile, p.models) == \
        ("vllm", False, ["ngram"], 4, "h100-llama3-8b", ["m"])
    assert p.workers[0].api_key_env == "K" and p.launch == {"x": 1}


@pytest.mark.parametrize("data, key, value", [
    ({"policy": {"kind": "goodput", "margn": 1.1}}, "policy.margn", 1.1),
    ({"policy": {"kind": "goodput", "margin": 0.5}}, "policy.margin", 0.5),
    ({"policy": {"kind": "magic"}}, "policy.kind", "magic"),
    ({"policy": {"margin": 1.1}}, "policy.kind", None),
    ({"policy": {"kind": "static", "proposer": "ngram", "gamma": 0}}, "policy.gamma", 0),
    ({"policy": {"kind": "static", "proposer": "medusa", "gamma": 2}}, "policy.proposer", "medusa"),
    ({"policy": {"kind": "threshold", "table": []}}, "policy.table", []),
    ({"policy": {"kind": "threshold", "table": [{"max_load": 8, "gamma": 1}, {"max_load": 4, "gamma": 2}]}},
     "policy.table", None),
    ({"policy": {"kind": "goodput", "default_profile": "tpu-v9"}}, "policy.default_profile", "tpu-v9"),
    ({"pools": [{"name": "a", "engine": "tgi", "workers": W}]}, "pools[0].engine", "tgi"),
    ({"pools": [{"name": "a", "workers": W, "gama": 3}]}, "pools[0].gama", 3),
    ({"pools": [{"name": "a"}]}, "pools[0].workers", None),
    ({"pools": [{"name": "a", "workers": [{"name": "w", "url": "ftp://x"}]}]}, "pools[0].workers[0].url", "ftp://x"),
    ({"pools": [{"name": "a", "workers": W}, {"name": "a", "workers": [{"name": "w1", "url": "http://h:2"}]}]},
     "pools[1].name", "a"),
    ({"pools": [{"name": "a", "workers": W}, {"name": "b", "workers": W}]}, "pools[1].workers[0].name", "w0"),
    ({"pools": [{"name": "a", "workers": W, "per_request": False, "gamma": 4}]}, "pools[0].proposers",
     ["ngram", "draft"]),
    ({"pools": [{"name": "a", "workers": W, "gamma": 4}]}, "pools[0].gamma", 4),
    ({"pools": [{"name": "a", "workers": W, "per_request": False, "proposers": ["ngram"], "gamma": 9,
                 "max_gamma": 8}]}, "pools[0].gamma", 9),
    ({"pools": [{"name": "a", "workers": W, "profile": "h100-llama3-8b", "proposers": ["hybrid"]}]},
     "pools[0].proposers", "hybrid"),
    ({"pools": [{"name": "a", "workers": W, "profile": "nope"}]}, "pools[0].profile", "nope"),
    ({"estimator": {"prior": {"alpha": {"draft": {"poetry": 0.5}}}}}, "estimator.prior.alpha.draft.poetry",
     "poetry"),
    ({"estimator": {"prior": {"alpha": {"ngram": {"chat": 1.5}}}}}, "estimator.prior.alpha.ngram.chat", 1.5),
    ({"estimator": {"half_life_tokens": 0}}, "estimator.half_life_tokens", 0),
    ({"state": {"backend": "etcd"}}, "state.backend", "etcd"),
    ({"server": {"port": 70000}}, "server.port", 70000),
    ({"serve": {}}, "serve", {}),
])
def test_errors_name_file_key_value(data, key, value):
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "cfg.yaml")
    e = exc.value
    assert (e.file, e.key) == ("cfg.yaml", key)
    if value is not None:
        assert e.value == value
    assert "cfg.yaml" in str(e) and key in str(e)


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: {kind: goodput\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text("policy: {kind: goodput}\npolicy: {kind: static}\n")
    with pytest.raises(ConfigError, match="duplicate key 'policy'"):
        load_config(dup)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(lst)


def test_pool_profile_file_relative_to_the_config(tmp_path):
    (tmp_path / "gpu.yaml").write_text(
        "name: gpu\ntarget: {overhead_s: 0.001, memory_floor_s: 0.01, compute_s_per_token: 0.0001}\n"
        "proposers: {ngram: {kind: ngram}, d: {kind: draft, memory_floor_s: 0.002}}\naliases: {draft: d}\n")
    f = tmp_path / "cfg.yaml"
    f.write_text("pools:\n  - {name: a, profile: gpu.yaml, workers: [{name: w, url: 'http://h:1'}]}\n")
    cfg = load_config(f)
    assert cfg.pools[0].profile == str(tmp_path / "gpu.yaml")


def test_calibration_section():
    assert parse_config({}).calibration.enabled is True
    cfg = parse_config({"calibration": {"enabled": False, "min_steps": 50, "prior_steps": 5}}).calibration
    assert (cfg.enabled, cfg.min_steps, cfg.prior_steps) == (False, 50, 5)
    with pytest.raises(ConfigError) as exc:
        parse_config({"calibration": {"prior_steps": 0}})
    assert exc.value.key == "calibration.prior_steps"
