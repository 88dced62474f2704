"""Policies: per request, pick a worker, a proposer and gamma (0 = off), with a one-line reason.

    static     fixed proposer + gamma (or off) on the least-loaded worker that offers it
    threshold  gamma from a load table, like vLLM's dynamic speculative decoding / TRT-LLM draft_len_schedule
    goodput    for every healthy worker and every proposer it offers: alpha estimate -> best gamma by the cost
               model at the worker's live load -> the highest expected goodput (tokens/s of this request);
               off unless a plan beats off by `margin`; fixed-speculation workers count at their fixed config
    bandit     goodput with alpha drawn from each key's Beta posterior (Thompson) or its upper bound (UCB),
               so keys without data get tried (BanditSpec-style exploration)

One module each in control/policies/ (the gamma-search memo in control/plancache.py); this module re-exports
them and builds one from config. With `schedule: true`, goodput also sends each request a gamma schedule
(control/schedule.py; see policies/goodput.py).

`build_policy(config.policy)` returns one; `.decide(content_class, workers, alphas) -> Decision`.
The batch a request joins is `worker.load + 1`. Gamma searches are cached per (profile, proposer,
batch bucket, alpha bucket), so a decision over a few workers takes tens of microseconds.
"""

from __future__ import annotations

from adaptspec.control.config import BanditPolicy, GoodputPolicy, PolicyConfig, StaticPolicy, ThresholdPolicy
from adaptspec.control.plancache import PlanCache
from adaptspec.control.policies.bandit import Bandit
from adaptspec.control.policies.batchplan import _pass_group as _pass_group
from adaptspec.control.policies.common import (
    estimate,
    fixed_config,
    healthy,
    least_loaded,
    offers,
    posterior_draw,
)
from adaptspec.control.policies.goodput import Goodput
from adaptspec.control.policies.static import Static
from adaptspec.control.policies.threshold import Threshold
from adaptspec.errors import ConfigError

__all__ = ["Bandit", "Goodput", "PlanCache", "Static", "Threshold", "build_policy", "estimate", "fixed_config",
           "posterior_draw"]

# the names these helpers had when they lived here
_healthy, _least_loaded, _offers = healthy, least_loaded, offers


def build_policy(cfg: PolicyConfig):
    """The policy object for a `config.policy` section (wrapped in the holdout / switchback experiment when
    the section has `holdout` or `switchback`)."""
    policy = _build(cfg)
    if cfg.holdout is not None or cfg.switchback is not None:
        from adaptspec.control.holdout_policy import Experimented

        return Experimented(policy, cfg.holdout, cfg.switchback)
    return policy


def _build(cfg: PolicyConfig):
    if isinstance(cfg, StaticPolicy):
        return Static(cfg)
    if isinstance(cfg, ThresholdPolicy):
        return Threshold(cfg)
    if isinstance(cfg, GoodputPolicy):
        return Goodput(cfg)
    if isinstance(cfg, BanditPolicy):
        return Bandit(cfg)
    from adaptspec.control.peers import build_peer  # the peer policies (control/peers/)

    peer = build_peer(cfg)
    if peer is not None:
        return peer
    raise ConfigError("unknown policy kind", key="policy.kind", value=getattr(cfg, "kind", cfg))
