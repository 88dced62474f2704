"""The policies a simulated sweep compares, by name (`adaptspec simulate --policies`) or from a config file
(`--policy-file`): `parse_policy`, `policy_from_file` -> `PolicySpec`."""

from __future__ import annotations

from dataclasses import dataclass

from adaptspec.control.types import PROPOSERS

# The threshold policy of the shipped policies/threshold.yaml (vLLM DSD / TRT-LLM draft_len_schedule style).
THRESHOLD_TABLE = ((4, 5), (16, 3), (32, 1))


@dataclass
class PolicySpec:
    """A named policy for a sweep: its config section and the estimator config it learns with."""

    name: str
    policy: object  # adaptspec.control.config.PolicyConfig (None for the oracle)
    estimator: object | None = None  # adaptspec.control.config.EstimatorConfig
    hindsight: bool = False  # the bench-only oracle (adaptspec.bench.oracle), needs a trace
    stepwise: bool = False  # with hindsight: `oracle-step`, the per-step hindsight bound (bench/stepwise.py)
    predict: bool | None = None  # per-request acceptance prediction on traces (None: the estimator's `predict`)

    def predicting(self) -> bool:
        if self.predict is not None:
            return self.predict
        from adaptspec.control.config import EstimatorConfig

        return (self.estimator or EstimatorConfig()).predict


def parse_policy(spec: str, profile: str, seed: int = 0) -> PolicySpec:
    """`off`, `static:<proposer>:<gamma>`, `threshold`, `adaptive` (= `goodput`), `adaptive-schedule` (goodput
    with per-request gamma schedules), `bandit` (= `explore`), `oracle` (hindsight, trace replay only),
    `oracle-step` (per-step hindsight bound, trace replay only). `static:hybrid:<g>` replays the causal per-step
    hybrid (bench/stepwise.py) on traces; the worker must offer "hybrid" (`proposers`).
    On traces with prompts `adaptive` predicts per request as `estimator.predict` says (default on);
    `adaptive+predict` / `adaptive-class` force the prediction on / off (class-level alphas only)."""
    from adaptspec.control.config import (
        BanditPolicy,
        GoodputPolicy,
        StaticPolicy,
        ThresholdPolicy,
        ThresholdRow,
    )
    from adaptspec.errors import ConfigError

    s = spec.strip()
    if s == "off":
        return PolicySpec(s, StaticPolicy(kind="static", proposer="none", gamma=0))
    if s.startswith("static:"):
        parts = s.split(":")
        if len(parts) != 3 or parts[1] not in PROPOSERS or not parts[2].isdigit():
            raise ConfigError("expected static:<proposer>:<gamma>, proposer one of "
                              f"{', '.join(PROPOSERS)}", key="--policies", value=s)
        return PolicySpec(s, StaticPolicy(kind="static", proposer=parts[1], gamma=int(parts[2])))
    if s == "threshold":
        return PolicySpec(s, ThresholdPolicy(kind="threshold", proposer="draft", proposer_by_class={"summarize": "ngram"},
                                             table=[ThresholdRow(max_load=m, gamma=g) for m, g in THRESHOLD_TABLE]))
    if s in ("adaptive", "goodput"):
        return PolicySpec(s, GoodputPolicy(kind="goodput", default_profile=profile))
    if s in ("adaptive+predict", "adaptive-class"):
        return PolicySpec(s, GoodputPolicy(kind="goodput", default_profile=profile), predict=s == "adaptive+predict")
    if s in ("adaptive-schedule", "goodput-schedule"):
        return PolicySpec(s, GoodputPolicy(kind="goodput", default_profile=profile, schedule=True))
    if s in ("bandit", "explore"):
        return PolicySpec(s, BanditPolicy(kind="bandit", default_profile=profile, seed=seed))
    if s == "oracle":
        return PolicySpec(s, None, hindsight=True)
    if s == "oracle-step":
        return PolicySpec(s, None, hindsight=True, stepwise=True)
    raise ConfigError("unknown policy; use off, static:<proposer>:<gamma>, threshold, adaptive, adaptive+predict, "
                      "adaptive-class, adaptive-schedule, bandit, oracle, oracle-step "
                      "(or --policy-file)", key="--policies", value=s)


def policy_from_file(path: str) -> PolicySpec:
    from pathlib import Path

    from adaptspec.control.config import load_config

    cfg = load_config(path)
    return PolicySpec(Path(path).stem, cfg.policy, cfg.estimator)
