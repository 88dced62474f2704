"""Online acceptance-rate (alpha) estimators. (Work in progress: priors only.)"""

from __future__ import annotations

# Prior per-token acceptance by proposer and content class. Draft-model numbers follow published
# per-task acceptance (code ~0.78, structured/JSON ~0.86, summarisation ~0.72); n-gram prompt lookup
# accepts much when the output copies the prompt (summarize, code edits) and little on open chat.
DEFAULT_PRIOR_ALPHA: dict[str, dict[str, float]] = {
    "draft": {"default": 0.70, "code": 0.78, "structured": 0.86, "summarize": 0.72, "translate": 0.60,
              "math": 0.75, "chat": 0.65},
    "eagle": {"default": 0.75, "code": 0.80, "structured": 0.85, "summarize": 0.75, "translate": 0.65,
              "math": 0.80, "chat": 0.72},
    "ngram": {"default": 0.30, "code": 0.50, "structured": 0.45, "summarize": 0.60, "translate": 0.10,
              "math": 0.30, "chat": 0.15},
}


def prior_alpha(proposer: str, content_class: str, table: dict[str, dict[str, float]] | None = None) -> float:
    """The prior mean alpha for a (proposer, class) key; unknown proposers fall back to 0.5."""
    by_class = (table or DEFAULT_PRIOR_ALPHA).get(proposer) or DEFAULT_PRIOR_ALPHA.get(proposer, {})
    return float(by_class.get(content_class, by_class.get("default", 0.5)))
