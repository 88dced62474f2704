"""Config sections of the peer policies (`policy.kind` values), validated like every policy section."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from adaptspec.control.config import SpecProposer, _OneProposer, _Priced


class SglangTier(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidate_steps: list[int] = Field(min_length=1)
    up_hysteresis: float = 0.0
    down_hysteresis: float = -0.25

    @field_validator("candidate_steps")
    @classmethod
    def _non_negative(cls, steps: list[int]) -> list[int]:
        if any(s < 0 or s > 32 for s in steps):
            raise ValueError(f"candidate_steps must be between 0 and 32, got {steps}")
        return steps


# sglang 0.5.23 speculative/adaptive_spec_params.py DEFAULT_ADAPTIVE_CONFIG, as data
SGLANG_TIERS = {
    1: SglangTier(candidate_steps=[1, 3, 5, 7], up_hysteresis=0.0, down_hysteresis=-0.25),
    8: SglangTier(candidate_steps=[0, 1, 3], up_hysteresis=0.0, down_hysteresis=0.0),
    32: SglangTier(candidate_steps=[0, 1], up_hysteresis=0.0, down_hysteresis=0.0),
    64: SglangTier(candidate_steps=[0], up_hysteresis=0.0, down_hysteresis=0.0),
}


class SglangAdaptivePolicy(_OneProposer):
    """SGLang's adaptive EAGLE depth by batch-size tier (control/peers/sglang_adaptive.py)."""

    kind: Literal["sglang_adaptive"]
    proposer: SpecProposer = "eagle"
    initial_steps: int = Field(default=3, ge=0, le=32)
    tiers: dict[int, SglangTier] = Field(default_factory=lambda: dict(SGLANG_TIERS), min_length=1)
    warmup_batches: int = Field(default=10, ge=0)
    update_interval: int = Field(default=5, ge=1)

    @field_validator("tiers")
    @classmethod
    def _positive_batches(cls, tiers: dict[int, SglangTier]) -> dict[int, SglangTier]:
        bad = [b for b in tiers if b < 1]
        if bad:
            raise ValueError(f"tier keys are batch sizes >= 1, got {bad}")
        return tiers


class DraftLenSchedulePolicy(_OneProposer):
    """TensorRT-LLM's draft_len_schedule / max_concurrency / acceptance gate (control/peers/trtllm_schedule.py)."""

    kind: Literal["draft_len_schedule"]
    proposer: SpecProposer = "eagle"
    max_draft_len: int = Field(default=4, ge=1, le=32)
    draft_len_schedule: dict[int, int] = Field(default_factory=lambda: {4: 4, 8: 2, 32: 1}, min_length=1)
    max_concurrency: int | None = Field(default=None, gt=0)
    acceptance_rate_window_size: int | None = Field(default=None, ge=0)
    acceptance_rate_threshold: float | None = Field(default=None, ge=0.0, le=1.0)

    @field_validator("draft_len_schedule")
    @classmethod
    def _rows(cls, rows: dict[int, int]) -> dict[int, int]:
        bad = {b: n for b, n in rows.items() if b < 1 or not 0 <= n <= 32}
        if bad:
            raise ValueError(f"rows are batch size (>= 1): draft length (0..32), got {bad}")
        return rows


class BatchCutoffPolicy(_OneProposer):
    """vLLM's speculative_disable_by_batch_size (control/peers/vllm_cutoff.py)."""

    kind: Literal["batch_cutoff"]
    proposer: SpecProposer = "eagle"
    num_speculative_tokens: int = Field(default=3, ge=1, le=32)
    disable_by_batch_size: int = Field(default=4, ge=1)


class SmartSpecPolicy(_OneProposer, _Priced):
    """SmartSpec-style goodput-optimal k per batch size, one scalar alpha (control/peers/smartspec.py)."""

    kind: Literal["smartspec"]
    proposer: SpecProposer = "eagle"
    max_gamma: int = Field(default=8, ge=1, le=32)


class BanditSpecPolicy(_Priced):
    """BanditSpec's UCBSpec over (proposer, gamma) arms (control/peers/banditspec.py)."""

    kind: Literal["banditspec_ucb"]
    proposers: list[SpecProposer] = Field(default_factory=lambda: ["eagle"], min_length=1)
    gammas: list[int] = Field(default_factory=lambda: [1, 2, 3, 4], min_length=1)
    exploration_weight: float = Field(default=6.0, ge=0.0)
    warmup_rounds: int = Field(default=2, ge=0)
    per_arm_bonus: bool = True

    @field_validator("gammas")
    @classmethod
    def _gammas(cls, gammas: list[int]) -> list[int]:
        if any(g < 1 or g > 32 for g in gammas) or len(set(gammas)) != len(gammas):
            raise ValueError(f"gammas must be distinct, each between 1 and 32, got {gammas}")
        return gammas


PEER_CONFIGS = (SglangAdaptivePolicy, DraftLenSchedulePolicy, BatchCutoffPolicy, SmartSpecPolicy, BanditSpecPolicy)
PEER_KINDS = tuple(c.model_fields["kind"].annotation.__args__[0] for c in PEER_CONFIGS)
