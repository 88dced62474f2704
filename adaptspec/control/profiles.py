"""Step-time profiles: one serving setup (hardware x target model x draft options) as a cost model.

Built-in profiles live in `adaptspec/control/profiles/<name>.yaml`; `load_profile(name)` also takes a path
to a YAML file of the same shape. A step-time model is given either from first principles

    target: {params: 70.6e9, bytes_per_param: 2, kv_bytes_per_token: 327680, overhead_s: 0.0025}
    hardware: {bandwidth_tb_s: 4.8, tflops: 989, gpus: 2, mbu: 0.55, mfu: 0.5}

(memory floor = weight bytes / (bandwidth * gpus * mbu), compute slope = 2 * params / (FLOP/s * gpus * mfu)),
or directly from measurement (what `cpu-tiny` does; `costmodel.fit_step_time` turns measured
(batched tokens, kv tokens, seconds) points into these four numbers):

    target: {overhead_s: 0.004, memory_floor_s: 0.006, kv_s_per_token: 0.0, compute_s_per_token: 0.0008}

(`combine: sum` adds the memory and compute terms instead of taking their max: CPUs, where attention over
the cache is arithmetic on the same cores as the matmuls.)

Draft options (`proposers:`) are `kind: draft` (a model, same two forms, defaults from `hardware`),
`kind: eagle` (`fraction` of a target step per drafted token, or the measured per-step form
`{overhead_s, per_token_s, kv_s_per_token}` = overhead_s + per_token_s * drafted tokens + kv_s_per_token * KV
tokens) or `kind: ngram` (`step_s`, `request_s`, and/or `verify_fraction`: a share of the verify step), or
`kind: hybrid` (`{lookup: <an ngram option>, fallback: <a draft or eagle option>, model_cost: 0.35,
model_call_cost: 0}`: lookup where it matches, the model elsewhere, priced from its two parts, see
costmodel.DraftCost; `model_cost` / `model_call_cost`, the worker's `--hybrid-model-cost` / `--hybrid-call-cost`,
price the model's shorter drafts, default 0: gamma at every miss; `stepwise: true`: a hybrid that picks its draft's
source at every step, as the reference worker's does, priced by costmodel.stepwise_hybrid). `aliases:` maps the generic
proposer names of the worker protocol (`draft`) to an option (`draft-8b`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from adaptspec.control.costmodel import DraftCost, StepTimeModel
from adaptspec.control.types import DraftingProposer
from adaptspec.errors import ConfigError

PROFILE_DIR = Path(__file__).with_name("profiles")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HardwareSpec(_Strict):
    name: str = ""
    bandwidth_tb_s: float = Field(gt=0)  # per GPU, TB/s
    tflops: float = Field(gt=0)  # per GPU, dense bf16 TFLOP/s
    gpus: int = Field(default=1, ge=1)  # tensor-parallel degree
    mbu: float = Field(default=0.7, gt=0, le=1)  # achieved share of peak memory bandwidth
    mfu: float = Field(default=0.5, gt=0, le=1)  # achieved share of peak FLOP/s


class ModelSpec(_Strict):
    """A step-time model: physical (params + hardware) or direct (measured seconds)."""

    name: str = ""
    # physical form
    params: float | None = Field(default=None, gt=0)
    bytes_per_param: float = Field(default=2.0, gt=0)
    kv_bytes_per_token: float = Field(default=0.0, ge=0)
    gpus: int | None = Field(default=None, ge=1)
    mbu: float | None = Field(default=None, gt=0, le=1)
    mfu: float | None = Field(default=None, gt=0, le=1)
    # both forms
    overhead_s: float = Field(default=0.0, ge=0)
    # direct form
    memory_floor_s: float | None = Field(default=None, ge=0)
    kv_s_per_token: float | None = Field(default=None, ge=0)
    compute_s_per_token: float | None = Field(default=None, ge=0)
    # how memory and compute time combine: max (roofline, GPUs) or sum (CPUs, where both are arithmetic)
    combine: Literal["max", "sum"] = "max"

    def _check_form(self) -> None:
        direct = self.memory_floor_s is not None or self.compute_s_per_token is not None
        if direct and self.params is not None:
            raise ValueError("give either params (physical form) or memory_floor_s/compute_s_per_token")
        if not direct and self.params is None:
            raise ValueError("give params (physical form) or memory_floor_s/compute_s_per_token")

    @model_validator(mode="after")
    def _one_form(self) -> ModelSpec:
        if not isinstance(self, DraftSpec):
            self._check_form()
        return self

    def step_model(self, hw: HardwareSpec | None) -> StepTimeModel:
        if self.params is None:
            return StepTimeModel(self.overhead_s, self.memory_floor_s or 0.0, self.kv_s_per_token or 0.0,
                                 self.compute_s_per_token or 0.0, additive=self.combine == "sum")
        if hw is None:
            raise ValueError("physical form needs a hardware section")
        if self.combine != "max":
            raise ValueError("combine: sum is for the direct (measured) form; the physical form is a roofline")
        gpus = self.gpus or hw.gpus
        return StepTimeModel.from_hardware(
            params=self.params,
            bytes_per_param=self.bytes_per_param,
            kv_bytes_per_token=self.kv_bytes_per_token,
            bandwidth_bytes_s=hw.bandwidth_tb_s * 1e12 * gpus,
            flops=hw.tflops * 1e12 * gpus,
            mbu=self.mbu or hw.mbu,
            mfu=self.mfu or hw.mfu,
            overhead_s=self.overhead_s,
        )


class DraftSpec(ModelSpec):
    kind: DraftingProposer
    fraction: float = Field(default=0.0, ge=0)
    step_s: float = Field(default=0.0, ge=0)
    request_s: float = Field(default=0.0, ge=0)
    per_token_s: float | None = Field(default=None, ge=0)  # eagle, measured form: seconds per drafted token
    verify_fraction: float = Field(default=0.0, ge=0, le=1)  # ngram: cost as a share of the verify step
    lookup: str | None = None  # hybrid: its n-gram option
    fallback: str | None = None  # hybrid: its model option (draft / eagle)
    # hybrid: the worker's prices of a model-drafted token and of drafting at all (`--hybrid-model-cost`,
    # `--hybrid-call-cost`); model_cost 0: its model drafts gamma
    model_cost: float = Field(default=0.0, ge=0, lt=1)
    model_call_cost: float = Field(default=0.0, ge=0, lt=4)
    # hybrid: true for a hybrid that picks its draft's source at every step (the reference worker's default rule,
    # worker/proposers/hybrid.py): priced by `costmodel.stepwise_hybrid`, its lookup steps and its model's apart,
    # from the report it splits by source; false: lookup first, the model at every miss
    stepwise: bool = False

    @model_validator(mode="after")
    def _kind_fields(self) -> DraftSpec:
        if self.kind == "hybrid":
            if not self.lookup or not self.fallback:
                raise ValueError("kind 'hybrid' needs lookup (an ngram option) and fallback (a draft/eagle option)")
            if set(self.model_fields_set) - {"kind", "lookup", "fallback", "model_cost", "model_call_cost",
                                             "stepwise"}:
                raise ValueError("kind 'hybrid' takes only lookup and fallback (it is priced from those options), "
                                 "model_cost, model_call_cost and stepwise")
            return self
        if self.lookup is not None or self.fallback is not None:
            raise ValueError("lookup / fallback are for kind 'hybrid'")
        if self.model_cost or self.model_call_cost or self.stepwise:
            raise ValueError("model_cost / model_call_cost / stepwise are for kind 'hybrid'")
        if self.kind == "draft":
            self._check_form()
        elif self.params is not None or self.memory_floor_s is not None:
            raise ValueError(f"kind {self.kind!r} takes no model (params / memory_floor_s)")
        measured = self.per_token_s is not None
        if self.kind == "eagle" and measured == (self.fraction > 0):
            raise ValueError("kind 'eagle' needs either fraction > 0 (cost of one head step / target step) or "
                             "the measured form {overhead_s, per_token_s, kv_s_per_token}")
        if self.kind != "eagle" and measured:
            raise ValueError("per_token_s is for kind 'eagle' (measured form)")
        if self.kind != "ngram" and self.verify_fraction:
            raise ValueError("verify_fraction is for kind 'ngram'")
        if self.kind == "ngram" and (self.overhead_s or self.kv_s_per_token):
            raise ValueError("kind 'ngram' takes step_s, request_s, verify_fraction")
        if self.kind == "eagle" and not measured and (self.overhead_s or self.kv_s_per_token):
            raise ValueError("overhead_s / kv_s_per_token go with per_token_s (eagle measured form)")
        return self


class ProfileSpec(_Strict):
    name: str
    description: str = ""
    provisional: bool = False  # numbers not yet measured / calibrated
    calibration: str = ""  # where the numbers come from
    hardware: HardwareSpec | None = None
    target: ModelSpec
    context_tokens: float = Field(default=1024, ge=0)  # mean KV length of a request in the batch
    proposers: dict[str, DraftSpec] = Field(default_factory=dict)
    aliases: dict[str, str] = Field(default_factory=dict)
    # the engine's verify forward pads every row's query to the longest draft in the batch (one padded attention
    # call, like the reference worker; vLLM and SGLang run ragged attention): then a request's draft length costs
    # every co-batched request, and the policy plans one gamma per worker for every proposer
    padded_verify: bool = False

    @model_validator(mode="after")
    def _aliases_resolve(self) -> ProfileSpec:
        for alias, target in self.aliases.items():
            if target not in self.proposers:
                raise ValueError(f"alias {alias!r} -> {target!r}: no such proposer option")
        for name, d in self.proposers.items():
            if d.kind != "hybrid":
                continue
            for role, ref, kinds in (("lookup", d.lookup, ("ngram",)), ("fallback", d.fallback, ("draft", "eagle"))):
                part = self.proposers.get(self.aliases.get(ref, ref))
                if part is None or part.kind not in kinds:
                    raise ValueError(f"hybrid {name!r}: {role} {ref!r} is not a {' or '.join(kinds)} option")
        return self


@dataclass(frozen=True)
class Profile:
    """A resolved profile: the target's step-time model and each draft option's cost."""

    name: str
    target: StepTimeModel
    context_tokens: float = 0.0
    drafts: dict[str, DraftCost] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    description: str = ""
    provisional: bool = False
    padded_verify: bool = False  # ProfileSpec.padded_verify

    def resolve(self, proposer: str) -> str:
        """Option name for a proposer name ('draft' -> 'draft-8b'); unknown names raise KeyError."""
        if proposer in self.drafts:
            return proposer
        if proposer in self.aliases:
            return self.aliases[proposer]
        raise KeyError(f"profile {self.name!r} has no proposer {proposer!r} (has {sorted(self.options())})")

    def draft(self, proposer: str) -> DraftCost:
        return self.drafts[self.resolve(proposer)]

    def options(self) -> list[str]:
        return list(self.drafts) + [a for a in self.aliases if a not in self.drafts]

    def offers(self, proposer: str) -> bool:
        return proposer in self.drafts or proposer in self.aliases

    def shared_gamma(self, proposer: str) -> bool:
        """Is this proposer's gamma a batch decision? A draft model / head runs max(gamma) batched passes, and on
        a padded verify (`padded_verify`) the longest draft sets every row's query length; n-gram lookup on a
        ragged engine costs only its own tokens."""
        return self.padded_verify or self.draft(proposer).kind != "ngram"

    @classmethod
    def memory_bound(cls, c: float, name: str = "memory-bound") -> Profile:
        """Verification costs one step whatever gamma; a draft step costs c target steps (Leviathan)."""
        return cls(name, StepTimeModel(memory_floor_s=1.0), 0.0,
                   {"draft": DraftCost("eagle", fraction=float(c))}, {}, "Leviathan et al. limit")

    @classmethod
    def from_spec(cls, spec: ProfileSpec) -> Profile:
        target = spec.target.step_model(spec.hardware)
        drafts: dict[str, DraftCost] = {}
        for name, d in spec.proposers.items():
            if d.kind == "draft":
                drafts[name] = DraftCost("draft", model=d.step_model(spec.hardware))
            elif d.kind == "eagle" and d.per_token_s is not None:
                drafts[name] = DraftCost("eagle", overhead_s=d.overhead_s, per_token_s=d.per_token_s,
                                         kv_s_per_token=d.kv_s_per_token or 0.0)
            elif d.kind == "eagle":
                drafts[name] = DraftCost("eagle", fraction=d.fraction)
            elif d.kind == "hybrid":
                assert d.lookup is not None and d.fallback is not None
                drafts[name] = DraftCost("hybrid", parts=(spec.aliases.get(d.lookup, d.lookup),
                                                          spec.aliases.get(d.fallback, d.fallback)),
                                         model_cost=d.model_cost, model_call_cost=d.model_call_cost,
                                         stepwise=d.stepwise)
            else:
                drafts[name] = DraftCost("ngram", step_s=d.step_s, request_s=d.request_s,
                                         verify_fraction=d.verify_fraction)
        return cls(spec.name, target, spec.context_tokens, compose_hybrids(drafts), dict(spec.aliases),
                   spec.description, spec.provisional, spec.padded_verify)


def compose_hybrids(drafts: dict[str, DraftCost]) -> dict[str, DraftCost]:
    """`drafts` with every hybrid option priced from its parts as `drafts` prices them now."""
    return {name: replace(d, lookup=drafts[d.parts[0]], fallback=drafts[d.parts[1]]) if d.kind == "hybrid" else d
            for name, d in drafts.items()}


def implied_hybrid(profile: Profile, head: str, name: str = "hybrid", stepwise: bool = False) -> Profile:
    """`profile` with a hybrid option `name` of n-gram lookup and `head` (a draft / eagle proposer) when it has none
    (a profile's own hybrid option is kept): what trace replay prices a per-step hybrid with when only its parts
    are in the profile. `profile` unchanged when it lacks a part. `stepwise`: priced as the per-step rule
    (`costmodel.stepwise_hybrid`: what the policy plans a replayed hybrid with)."""
    if profile.offers(name) or not (profile.offers("ngram") and profile.offers(head)):
        return profile
    if profile.draft("ngram").kind != "ngram" or profile.draft(head).kind not in ("draft", "eagle"):
        return profile
    drafts = dict(profile.drafts)
    drafts[name] = DraftCost("hybrid", parts=(profile.resolve("ngram"), profile.resolve(head)), stepwise=stepwise)
    return replace(profile, drafts=compose_hybrids(drafts))


def list_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_profile(data: object, source: str) -> Profile:
    try:
        spec = ProfileSpec.model_validate(data)
        return Profile.from_spec(spec)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"invalid profile: {err['msg']}", file=source, key=_loc(err["loc"]) or None,
                          value=err.get("input") if err["loc"] else None) from None
    except ValueError as exc:
        raise ConfigError(f"invalid profile: {exc}", file=source) from None


@functools.lru_cache(maxsize=64)
def load_profile(name: str) -> Profile:
    """A built-in profile by name (see `list_profiles()`), or a YAML file by path."""
    path = Path(name)
    if not (name.endswith((".yaml", ".yml")) and path.exists()):
        path = PROFILE_DIR / f"{name}.yaml"
        if not path.exists():
            raise ConfigError(f"unknown profile; built-in profiles: {', '.join(list_profiles())}",
                              key="profile", value=name)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", file=str(path)) from None
    return parse_profile(data, str(path))
