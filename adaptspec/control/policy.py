"""Moving to control/policies/ (one module per policy): the names, re-exported from where they live now."""

from adaptspec.control.policies.goodput import (  # noqa: F401
    Bandit, Goodput, PlanCache, Static, Threshold, _healthy, _least_loaded, _offers, _pass_group, build_policy,
    estimate, fixed_config, posterior_draw,
)
