"""Shadow n-gram evidence in the simulator: a traced request served without lookup teaches the lookup's key
from its recorded runs (what the reference worker reports and the proxy counts), exactly as much as the same
request served with lookup would have; `SimConfig(shadow=False)` turns it off."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adaptspec.bench.simulator import ProfileCost, SimConfig, simulate
from adaptspec.bench.traces import TraceRequest, TraceWorkload
from adaptspec.control.estimators import AlphaTable
from adaptspec.control.profiles import load_profile
from adaptspec.control.shadow import walk_runs
from adaptspec.control.types import Decision

NGRAM = (9, 3, 1, 2, 4, 1, 1, 2, 1, 1, 6, 1, 1, 1, 3, 1)
REQ = TraceRequest("r", "chat", 4, len(NGRAM), 8, {"ngram": NGRAM, "draft": (2,) * len(NGRAM)})


class Fixed:
    def __init__(self, proposer: str, gamma: int) -> None:
        self.name, self.proposer, self.gamma = "fixed", proposer, gamma

    def decide(self, content_class, workers, alphas) -> Decision:
        return Decision(workers[0].name, self.proposer, self.gamma, content_class, self.name, "fixed")


def run(proposer: str, gamma: int, shadow: bool = True) -> AlphaTable:
    cost = ProfileCost(load_profile("cpu-tiny"))
    table = AlphaTable()
    cfg = SimConfig(concurrency=1, requests=3, warmup=0, shadow=shadow)
    worker = replace(cost.worker(), proposers=("ngram", "draft"))
    simulate(Fixed(proposer, gamma), cost, TraceWorkload([REQ]), cfg, alphas=table, worker=worker)
    return table


@pytest.mark.parametrize("proposer", ["none", "draft"])
def test_requests_without_lookup_teach_its_key_as_lookup_requests_would(proposer):
    shadowed = run(proposer, 4)
    ran = run("ngram", 8, shadow=False)  # the same request served with lookup at the walk's gamma
    est, want = shadowed.get("sim0", "ngram", "chat"), ran.get("sim0", "ngram", "chat")
    assert est.n > 0
    assert est.mean == pytest.approx(want.mean, rel=1e-9)
    assert est.per_position == pytest.approx(want.per_position, rel=1e-9)
    # three requests of the walk's counts
    s = walk_runs(NGRAM, len(NGRAM), 8)
    assert est.n == pytest.approx(3 * sum(s.tried_per_position), rel=0.05)  # (discounting by tokens)


def test_shadow_off_leaves_the_lookup_key_alone():
    assert run("none", 0, shadow=False).get("sim0", "ngram", "chat").n == 0
    assert run("draft", 4, shadow=False).get("sim0", "ngram", "chat").n == 0


def test_cli_no_shadow_flag(tmp_path):
    """`adaptspec simulate --trace` with and without --no-shadow, on chat requests whose answers copy the prompt
    (n-gram runs of 7) while the EAGLE head accepts one token a step: the static policies (which read no
    estimates) are identical; adaptive starts from the priors (EAGLE 0.72 on chat, n-gram 0.15) and switches
    to lookup only when the EAGLE requests' shadow shows what lookup would have accepted."""
    import json

    from adaptspec.bench.traces import dump
    from adaptspec.cli import main

    n = 64
    trace = tmp_path / "t.jsonl"
    dump([TraceRequest(f"r{i}", "chat", 200, n, 8, {"ngram": (7,) * n, "eagle": (2,) * n}) for i in range(8)],
         str(trace))
    rows = {}
    for flag in ([], ["--no-shadow"]):
        out = tmp_path / f"o{len(flag)}.json"
        assert main(["simulate", "--trace", str(trace), "--profile", "h100-llama3-8b-measured", "--proposers",
                     "ngram,eagle", "--policies", "off,static:eagle:3,static:ngram:8,adaptive", "--concurrency", "1",
                     "--requests", "24", "--warmup", "8", "--no-progress", *flag, "--json", str(out)]) == 0
        rows["off" if flag else "on"] = {r["policy"]: r for r in json.loads(out.read_text())}
    for p in ("off", "static:eagle:3", "static:ngram:8"):
        assert rows["on"][p]["output_tokens_per_s"] == rows["off"][p]["output_tokens_per_s"]
    on, off = rows["on"]["adaptive"], rows["off"]["adaptive"]
    assert on["proposer_mix"]["ngram"] == 1.0 and off["proposer_mix"]["eagle"] > 0.9
    assert on["output_tokens_per_s"] > 1.5 * off["output_tokens_per_s"]
