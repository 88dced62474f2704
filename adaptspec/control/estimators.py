"""Online acceptance-rate (alpha) estimation, re-exported from its three parts:

- control/alpha.py      the discounted Beta posteriors per (worker, proposer, class, regime): AlphaTable,
                        priors, sampling regimes, the truncated-geometric alpha math;
- control/counters.py   cumulative engine counters -> observations (CounterTracker, ingest_vllm/_sglang);
- control/traffic.py    the moving averages of a worker's request shape (TrafficShape).

Import from here or from the part; both keep working.
"""

from __future__ import annotations

from adaptspec.control.alpha import (  # noqa: F401
    ANY_CLASS,
    DEFAULT_PRIOR_ALPHA,
    DEFAULT_SAMPLED_FACTOR,
    GREEDY,
    REGIMES,
    SAMPLED,
    AlphaTable,
    KeyStats,
    RegimeView,
    alpha_from_accept_length,
    alpha_from_steps,
    decay_stats,
    merge_stats,
    prior_alpha,
    regime_key,
    sampling_regime,
    truncated_mean_accepted,
)
from adaptspec.control.counters import (  # noqa: F401
    BY_CLASS_ACCEPTED,
    BY_CLASS_DRAFT_TOKENS,
    BY_CLASS_DRAFTS,
    SGLANG_ACCEPT_LENGTH,
    SGLANG_GEN_TOKENS,
    SGLANG_STYLE,
    VLLM_ACCEPTED,
    VLLM_DRAFT_TOKENS,
    VLLM_DRAFTS,
    VLLM_PER_POS,
    VLLM_STYLE,
    CounterTracker,
    Sample,
    ingest_sglang,
    ingest_vllm,
)
from adaptspec.control.traffic import TrafficShape  # noqa: F401
