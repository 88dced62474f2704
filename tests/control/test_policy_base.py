"""Every policy kind derives from `PolicyBase`, whose optional capabilities its users read as attributes."""

from __future__ import annotations

import pytest

from adaptspec.control.calibration_probe import ContrastProbe, GammaProbe
from adaptspec.control.config import parse_config
from adaptspec.control.holdout_policy import Experimented
from adaptspec.control.hybrid_rule import RuleBook
from adaptspec.control.peers import PEER_KINDS
from adaptspec.control.policy import build_policy
from adaptspec.control.policy_base import PolicyBase
from adaptspec.control.profiles import Profile

KINDS = ["static", "threshold", "goodput", "bandit", *PEER_KINDS]
READS_ALPHAS = {"goodput", "bandit", "sglang_adaptive", "draft_len_schedule", "smartspec", "banditspec_ucb"}
PRICED = {"goodput", "bandit", "smartspec", "banditspec_ucb"}  # a step-cost profile of their own
REQUIRED = {"threshold": {"table": [{"max_load": 4, "gamma": 4}]}}
ONE_PROPOSER = {"static": "none", "threshold": "draft", "sglang_adaptive": "eagle", "draft_len_schedule": "eagle",
                "batch_cutoff": "eagle", "smartspec": "eagle"}  # the kinds that draft with one proposer they name


def _policy(kind: str, **experiment) -> PolicyBase:
    return build_policy(parse_config({"policy": {"kind": kind, **REQUIRED.get(kind, {}), **experiment}}).policy)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_declares_the_capabilities(kind):
    policy = _policy(kind)
    assert isinstance(policy, PolicyBase) and policy.name
    assert policy.uses_alphas == (kind in READS_ALPHAS)
    assert isinstance(policy.default_profile, Profile) if kind in PRICED else policy.default_profile is None
    probes = kind in ("goodput", "bandit")
    assert isinstance(policy.contrast_probe, ContrastProbe) if probes else policy.contrast_probe is None
    assert isinstance(policy.gamma_probe, GammaProbe) if probes else policy.gamma_probe is None
    assert policy.experiment is None
    # the per-step hybrid's rule book: the cost-model policies keep one (fed by the proxy, kept across a reload)
    assert isinstance(policy.rules, RuleBook) if probes else policy.rules is None
    policy.adopt(None)  # nothing to take over: a no-op
    old = _policy(kind)
    policy.adopt(old)
    assert policy.rules is old.rules


@pytest.mark.parametrize("kind", KINDS)
def test_every_section_declares_its_profile_and_proposer(kind):
    """A policy section's readers (config validation, the simulator's worker check) read declared properties."""
    section = parse_config({"policy": {"kind": kind, **REQUIRED.get(kind, {})}}).policy
    assert section.priced_profile == ("cpu-tiny" if kind in PRICED else None)
    assert section.named_proposer == ONE_PROPOSER.get(kind)
    priced = build_policy(section).default_profile
    assert (priced.name if priced is not None else None) == section.priced_profile


@pytest.mark.parametrize("kind", ["static", "goodput", "smartspec"])
def test_the_experiment_has_its_inner_policys_capabilities(kind):
    wrapped = _policy(kind, holdout={"share": 0.1})
    assert isinstance(wrapped, Experimented) and wrapped.experiment is wrapped
    inner = wrapped.inner
    assert wrapped.name == inner.name and wrapped.uses_alphas == inner.uses_alphas
    assert wrapped.default_profile is inner.default_profile
    assert wrapped.contrast_probe is inner.contrast_probe and wrapped.gamma_probe is inner.gamma_probe
    assert wrapped.rules is inner.rules
    again = _policy(kind, holdout={"share": 0.1})
    again.adopt(wrapped)  # a reload: the new experiment's inner policy keeps the rule book
    assert again.rules is wrapped.rules


def test_the_base_decides_nothing():
    with pytest.raises(NotImplementedError):
        PolicyBase().decide("chat", [], None)
