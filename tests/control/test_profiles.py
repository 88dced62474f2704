import pytest

from adaptspec.control.profiles import list_profiles, load_profile, parse_profile
from adaptspec.errors import ConfigError


def test_builtin_profiles_load():
    names = list_profiles()
    assert {"h100-llama3-8b", "h100-llama3-70b", "h200-llama3-8b", "h200-llama3-70b", "cpu-tiny"} <= set(names)
    for n in names:
        p = load_profile(n)
        assert p.name == n
        assert p.offers("ngram") and (p.offers("draft") or p.offers("eagle"))
        assert p.target.time(1) > 0


def test_70b_profiles_offer_1b_8b_eagle_ngram():
    for hw in ("h100", "h200"):
        p = load_profile(f"{hw}-llama3-70b")
        assert {"draft-1b", "draft-8b", "eagle", "ngram"} <= set(p.drafts)
        assert p.resolve("draft") == "draft-8b"
        c8 = p.draft("draft-8b").time(1, 1, p.context_tokens, p.target) / p.target.time(1, p.context_tokens)
        c1 = p.draft("draft-1b").time(1, 1, p.context_tokens, p.target) / p.target.time(1, p.context_tokens)
        assert 0.08 < c8 < 0.25 and c1 < c8


def test_cpu_tiny_is_measured_and_fits_its_anchor_points():
    p = load_profile("cpu-tiny")
    assert not p.provisional
    assert p.target.additive
    # the worker's `none` steps (engine-thread CPU, benchmarks/results/cpu-tiny-profile/calibration-cpu-tiny-worker.json): batched and
    # KV tokens per step -> ms per step at 1/8/16/32 clients; the profile's header says -4..+7%
    for batched, kv, ms in ((4.5, 187, 8.00), (23.1, 1071, 17.80), (38.3, 1800, 28.29), (82.3, 3984, 57.42)):
        assert p.target.time(batched, kv) == pytest.approx(ms / 1e3, rel=0.1)
    # the worker's wall counters on the idle box at 128/256 clients without speculation
    # (benchmarks/results/cpu-tiny-profile/cpu-compare-128-256-run3.json; KV = context_tokens x requests per step)
    for batched, requests, ms in ((293.7, 85.9, 169.8), (587.5, 163.9, 343.6)):
        assert p.target.time(batched, requests * p.context_tokens) == pytest.approx(ms / 1e3, rel=0.15)
    # drafted tokens are not free at high batch on a CPU: 64 x 5 tokens cost > 2x 64 x 1
    assert p.target.time(320, 64 * p.context_tokens) > 2.0 * p.target.time(64, 64 * p.context_tokens)
    # a draft-model pass ~0.315 of the batch-1 step, an EAGLE head pass ~0.227 (benchmarks/fit_proposer_costs.py)
    assert p.draft("draft").time(1, 1, p.context_tokens, p.target) / 0.00796 == pytest.approx(0.315, rel=0.05)
    assert p.draft("eagle").time(1, 1, p.context_tokens, p.target) / 0.00796 == pytest.approx(0.227, rel=0.05)


def test_unknown_profile_and_proposer():
    with pytest.raises(ConfigError, match="unknown profile.*nope"):
        load_profile("nope")
    with pytest.raises(KeyError, match="hybrid"):
        load_profile("h100-llama3-8b").resolve("hybrid")


def test_profile_file_by_path(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\ntarget: {overhead_s: 0.001, memory_floor_s: 0.01, compute_s_per_token: 0.0001}\n"
                 "proposers: {ngram: {kind: ngram, step_s: 0.0}}\n")
    p = load_profile(str(f))
    assert p.target.time(200) == pytest.approx(0.021)


@pytest.mark.parametrize("data, key", [
    ({"name": "x", "target": {"params": 1e9}, "bogus": 1}, "bogus"),
    ({"name": "x", "target": {"memory_floor_s": -1}}, "target.memory_floor_s"),
    ({"name": "x", "target": {"memory_floor_s": 0.1}, "proposers": {"d": {"kind": "lstm"}}}, "proposers.d.kind"),
    ({"name": "x", "target": {"memory_floor_s": 0.1, "combine": "min"}}, "target.combine"),
])
def test_bad_profile_names_key(data, key):
    with pytest.raises(ConfigError) as exc:
        parse_profile(data, "p.yaml")
    assert exc.value.key == key and exc.value.file == "p.yaml"


def test_physical_form_needs_hardware():
    with pytest.raises(ConfigError, match="hardware"):
        parse_profile({"name": "x", "target": {"params": 1e9}}, "p.yaml")


def test_combine_sum_is_for_measured_models_only():
    p = parse_profile({"name": "x", "target": {"overhead_s": 0.001, "kv_s_per_token": 1e-6,
                                               "compute_s_per_token": 1e-4, "combine": "sum"}}, "p.yaml")
    assert p.target.additive and p.target.time(10, 1000) == pytest.approx(0.001 + 1e-3 + 1e-3)
    with pytest.raises(ConfigError, match="combine"):
        parse_profile({"name": "x", "hardware": {"bandwidth_tb_s": 1, "tflops": 1},
                       "target": {"params": 1e9, "combine": "sum"}}, "p.yaml")


def test_measured_form_costs_are_exact():
    p = load_profile("h100-llama3-8b-measured")
    t = p.target
    assert t.additive and t.time(1, 0) == pytest.approx(0.007 + 2.1e-5)
    assert t.time(300, 50_000) == pytest.approx(0.007 + 2.1e-5 * 300 + 1.5e-8 * 50_000, rel=1e-12)
    eagle, ngram = p.draft("eagle"), p.draft("ngram")
    assert eagle.per_step and not ngram.per_step
    # eagle: per step, overhead + per drafted token + per KV token (gamma 3 for each of 8 requests = 24 tokens)
    assert eagle.time(3, 8, 8192, t) == pytest.approx(6e-4 + 1.2e-5 * 24 + 2e-9 * 8192, rel=1e-12)
    # ngram: a share of the verify step, given or the target's over batch * (gamma + 1) tokens
    assert ngram.time(4, 8, 8192, t, verify_s=0.02) == pytest.approx(0.03 * 0.02, rel=1e-12)
    assert ngram.time(4, 8, 8192, t) == pytest.approx(0.03 * t.time(40, 8192), rel=1e-12)
    assert eagle.time(0, 8, 8192, t) == ngram.time(0, 8, 8192, t) == 0.0


def test_simulator_prices_the_measured_forms_per_step():
    import numpy as np

    from adaptspec.bench.simulator import ProfileCost

    cost = ProfileCost(load_profile("h100-llama3-8b-measured"))
    # eagle per step: one overhead however many passes (max gamma 5) and requests
    assert cost.draft_time("eagle", np.array([1, 5, 2]), 3000) == pytest.approx(6e-4 + 1.2e-5 * 8 + 2e-9 * 3000)
    assert cost.draft_time("ngram", np.array([4, 4]), 3000, verify_s=0.05) == pytest.approx(0.03 * 0.05)


def test_old_forms_stay_valid_and_forms_do_not_mix():
    base = {"name": "x", "target": {"overhead_s": 0.001, "memory_floor_s": 0.004}}
    old = parse_profile({**base, "proposers": {"eagle": {"kind": "eagle", "fraction": 0.05},
                                                "ngram": {"kind": "ngram", "step_s": 1e-5, "request_s": 1e-6}}}, "x")
    assert old.draft("eagle").fraction == 0.05 and not old.draft("eagle").per_step
    assert old.draft("ngram").time(4, 10, 0, old.target) == pytest.approx(1e-5 + 1e-5)
    for bad, words in [
        ({"kind": "eagle", "fraction": 0.05, "per_token_s": 1e-5}, "either fraction"),
        ({"kind": "eagle"}, "either fraction"),
        ({"kind": "eagle", "fraction": 0.05, "overhead_s": 1e-3}, "go with per_token_s"),
        ({"kind": "ngram", "per_token_s": 1e-5}, "for kind 'eagle'"),
        ({"kind": "eagle", "per_token_s": 1e-5, "verify_fraction": 0.1}, "for kind 'ngram'"),
        ({"kind": "ngram", "verify_fraction": 1.5}, "less than or equal"),
        ({"kind": "ngram", "overhead_s": 1e-3}, "takes step_s"),
    ]:
        with pytest.raises(ConfigError, match=words) as err:
            parse_profile({**base, "proposers": {"p": bad}}, "f.yaml")
        assert err.value.file == "f.yaml"


def test_measured_profile_files_work_wherever_a_name_does(tmp_path):
    from adaptspec.cli import main
    from adaptspec.control.config import parse_config
    from adaptspec.control.profiles import PROFILE_DIR

    f = tmp_path / "mine.yaml"
    text = (PROFILE_DIR / "h100-llama3-8b-measured.yaml").read_text()
    f.write_text(text.replace("name: h100-llama3-8b-measured", "name: mine"))
    assert load_profile(str(f)).name == "mine"
    cfg = parse_config({"pools": [{"name": "a", "engine": "adaptspec", "proposers": ["ngram", "eagle"],
                                   "profile": str(f), "workers": [{"name": "w", "url": "http://127.0.0.1:1"}]}],
                        "policy": {"kind": "goodput", "default_profile": str(f)}}, "cfg.yaml")
    assert cfg.pools[0].profile == str(f)
    out = tmp_path / "rows.json"
    assert main(["simulate", "--profile", str(f), "--truth-profile", str(f), "--policies", "off,adaptive",
                 "--concurrency", "1", "--requests", "8", "--warmup", "2", "--json", str(out),
                 "--no-progress"]) == 0
    assert out.exists()
