"""Peer policies: the adaptive algorithms of the engines and papers adaptspec is compared with.

    sglang_adaptive     SGLang 0.5.23 adaptive EAGLE depth by batch-size tier    (sglang_adaptive.py)
    draft_len_schedule  TensorRT-LLM draft_len_schedule + acceptance gate         (trtllm_schedule.py)
    batch_cutoff        vLLM speculative_disable_by_batch_size                    (vllm_cutoff.py)
    smartspec           SmartSpec goodput-optimal k, no content awareness         (smartspec.py)
    banditspec_ucb      BanditSpec UCBSpec over (proposer, gamma) arms            (banditspec.py)

Each module's docstring cites the source it follows and says what it leaves out; each has a ready policy file in
policies/peers/. They learn only from what the proxy observes: the per-request acceptance feedback (through the
AlphaSource every policy is handed) and the live load of the workers.
"""

from __future__ import annotations

from adaptspec.control.peers.config import (
    PEER_CONFIGS,
    PEER_KINDS,
    BanditSpecPolicy,
    BatchCutoffPolicy,
    DraftLenSchedulePolicy,
    SglangAdaptivePolicy,
    SmartSpecPolicy,
)

__all__ = ["PEER_CONFIGS", "PEER_KINDS", "build_peer"]


def build_peer(cfg: object):
    """The policy object of a peer config section; None for any other section."""
    if isinstance(cfg, SglangAdaptivePolicy):
        from adaptspec.control.peers.sglang_adaptive import SglangAdaptive

        return SglangAdaptive(cfg)
    if isinstance(cfg, DraftLenSchedulePolicy):
        from adaptspec.control.peers.trtllm_schedule import DraftLenSchedule

        return DraftLenSchedule(cfg)
    if isinstance(cfg, BatchCutoffPolicy):
        from adaptspec.control.peers.vllm_cutoff import BatchCutoff

        return BatchCutoff(cfg)
    if isinstance(cfg, SmartSpecPolicy):
        from adaptspec.control.peers.smartspec import SmartSpec

        return SmartSpec(cfg)
    if isinstance(cfg, BanditSpecPolicy):
        from adaptspec.control.peers.banditspec import BanditSpecUCB

        return BanditSpecUCB(cfg)
    return None
