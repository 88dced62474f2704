"""The vLLM seams the plugin relies on, and a checker that reads them from a release's source without importing it.

The plugin (`_vllm_patches.py`) wraps a handful of vLLM methods and reads a few attributes. vLLM moves
internals between releases, and a patch on a moved seam would either crash the engine or, worse, silently
stop limiting drafts. So every release the plugin claims to support is checked against this manifest from its
wheel (`pip download vllm==X --no-deps`): each patched class and method must exist with the parameters the
patch passes, and each attribute the patch reads must be assigned in its class. Nothing is imported, so the
check runs on any machine, GPU build or not:

    python -m adaptspec.integrations.vllm_seams vllm-0.33.0-*.whl      # prints problems, exit 1 if any

A release whose seams moved fails loudly (tests/integrations/test_vllm_seams.py); it then needs its patches
re-read before it joins `vllm_plugin.SUPPORTED_VLLM`.
"""

from __future__ import annotations

import ast
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
ASYNC_SCHEDULER = "vllm/v1/core/sched/async_scheduler.py"
SCHED_OUTPUT = "vllm/v1/core/sched/output.py"
REQUEST = "vllm/v1/request.py"
STATS = "vllm/v1/metrics/stats.py"
OUTPUTS = "vllm/v1/outputs.py"
INPUT_PROCESSOR = "vllm/v1/engine/input_processor.py"
OUTPUT_PROCESSOR = "vllm/v1/engine/output_processor.py"
EXCEPTIONS = "vllm/exceptions.py"
LOGGERS = "vllm/v1/metrics/loggers.py"
ENGINE = "vllm/v1/engine/__init__.py"
DETOKENIZER = "vllm/v1/engine/detokenizer.py"


@dataclass(frozen=True)
class Method:
    """`cls.name` must be defined in `cls`'s own body, its leading parameters exactly `params`, and accept
    the keyword-only parameters `kwonly` (the patch passes the rest through as *args/**kwargs)."""

    file: str
    cls: str
    name: str
    params: tuple[str, ...]
    kwonly: tuple[str, ...] = ()

    def where(self) -> str:
        return f"{self.file}: {self.cls}.{self.name}"


@dataclass(frozen=True)
class Attribute:
    """`cls` must give its instances `name`: a class-level annotation, a `self.name = ...` in a method, or a
    property."""

    file: str
    cls: str
    name: str

    def where(self) -> str:
        return f"{self.file}: {self.cls}.{self.name}"


SEAMS: tuple[Method | Attribute, ...] = (
    # engine core: per-request draft limits
    Method(SCHEDULER, "Scheduler", "update_draft_token_ids", ("self", "draft_token_ids")),
    Method(SCHEDULER, "Scheduler", "_update_after_schedule", ("self", "scheduler_output")),
    Method(SCHEDULER, "Scheduler", "add_request", ("self", "request")),
    Method(ASYNC_SCHEDULER, "AsyncScheduler", "_update_after_schedule", ("self", "scheduler_output")),
    Attribute(SCHEDULER, "Scheduler", "requests"),
    Attribute(SCHEDULER, "Scheduler", "num_spec_tokens"),
    Attribute(OUTPUTS, "DraftTokenIds", "req_ids"),
    Attribute(SCHED_OUTPUT, "SchedulerOutput", "num_scheduled_tokens"),
    Attribute(SCHED_OUTPUT, "SchedulerOutput", "total_num_scheduled_tokens"),
    Attribute(SCHED_OUTPUT, "SchedulerOutput", "scheduled_spec_decode_tokens"),
    Attribute(REQUEST, "Request", "spec_token_ids"),
    Attribute(REQUEST, "Request", "sampling_params"),
    Attribute(REQUEST, "Request", "spec_decode_metrics"),
    Method(STATS, "RequestSpecDecodeMetrics", "new", ("cls", "num_spec_tokens")),
    Attribute(STATS, "RequestSpecDecodeMetrics", "histogram"),
    Attribute(STATS, "RequestSpecDecodeMetrics", "num_draft_tokens"),
    # engine core -> API server: step telemetry (a step window rides in SchedulerStats, taken out in record)
    Method(SCHEDULER, "Scheduler", "schedule", ("self",)),
    Method(SCHEDULER, "Scheduler", "update_from_output", ("self", "scheduler_output", "model_runner_output")),
    Attribute(SCHEDULER, "Scheduler", "vllm_config"),
    Attribute(REQUEST, "Request", "num_computed_tokens"),
    Attribute(ENGINE, "EngineCoreOutputs", "scheduler_stats"),
    Attribute(STATS, "SchedulerStats", "num_kv_fetch_reqs_by_stage"),
    Method(LOGGERS, "StatLoggerManager", "record", ("self", "scheduler_stats")),
    # API server: validation and per-class counters
    Method(INPUT_PROCESSOR, "InputProcessor", "_validate_params", ("self", "params")),
    Method(OUTPUT_PROCESSOR, "OutputProcessor", "add_request", ("self", "request")),
    Method(OUTPUT_PROCESSOR, "OutputProcessor", "_finish_request", ("self", "req_state")),
    Attribute(OUTPUT_PROCESSOR, "OutputProcessor", "request_states"),
    Attribute(OUTPUT_PROCESSOR, "RequestState", "spec_decode_metrics"),
    # API server: the shadow n-gram walk of a finished request (its token ids and sampling temperature)
    Attribute(OUTPUT_PROCESSOR, "RequestState", "prompt_token_ids"),
    Attribute(OUTPUT_PROCESSOR, "RequestState", "detokenizer"),
    Attribute(OUTPUT_PROCESSOR, "RequestState", "temperature"),
    Attribute(DETOKENIZER, "IncrementalDetokenizer", "output_token_ids"),
    Method(EXCEPTIONS, "VLLMValidationError", "__init__", ("self", "message"), kwonly=("parameter",)),
)


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _function(cls: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    return None


def _check_method(seam: Method, cls: ast.ClassDef) -> str | None:
    fn = _function(cls, seam.name)
    if fn is None:
        return f"{seam.where()}: method not defined in the class"
    positional = tuple(a.arg for a in fn.args.posonlyargs + fn.args.args)
    if positional[: len(seam.params)] != seam.params:
        return f"{seam.where()}: parameters {positional}, the patch expects them to start with {seam.params}"
    kwonly = {a.arg for a in fn.args.kwonlyargs}
    missing = [k for k in seam.kwonly if k not in kwonly and k not in positional]
    if missing and fn.args.kwarg is None:
        return f"{seam.where()}: no parameter {missing[0]!r}"
    return None


def _assigns(cls: ast.ClassDef, name: str) -> bool:
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return True  # a property (or a method the patch only reads)
    for node in ast.walk(cls):
        targets: Iterable[ast.expr] = ()
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = (node.target,)
        for t in targets:
            if (isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name)
                    and t.value.id == "self"):
                return True
    return False


def check_sources(read: Callable[[str], str | None], seams: Iterable[Method | Attribute] = SEAMS) -> list[str]:
    """Problems found, one line each (empty: every seam is where the patches expect it).

    `read(path)` returns the text of a file of the vLLM tree (`vllm/...`), or None when it is absent."""
    problems: list[str] = []
    parsed: dict[str, dict[str, ast.ClassDef] | None] = {}
    for seam in seams:
        if seam.file not in parsed:
            text = read(seam.file)
            parsed[seam.file] = None if text is None else _classes(ast.parse(text, filename=seam.file))
        classes = parsed[seam.file]
        if classes is None:
            problems.append(f"{seam.file}: file not found")
            continue
        cls = classes.get(seam.cls)
        if cls is None:
            problems.append(f"{seam.file}: class {seam.cls} not found")
            continue
        problem = (_check_method(seam, cls) if isinstance(seam, Method)
                   else None if _assigns(cls, seam.name) else f"{seam.where()}: attribute never assigned")
        if problem:
            problems.append(problem)
    return sorted(set(problems), key=problems.index)


def check_wheel(path: str | Path) -> list[str]:
    """`check_sources` over a vLLM wheel (or any zip holding the `vllm/` tree), read in place."""
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        return check_sources(lambda f: wheel.read(f).decode("utf-8") if f in names else None)


def wheel_version(path: str | Path) -> str:
    """The release a wheel file holds, from its name (`vllm-0.33.0-cp38-...whl` -> `0.33.0`)."""
    return Path(path).name.split("-")[1]


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        sys.stderr.write("usage: python -m adaptspec.integrations.vllm_seams WHEEL [WHEEL ...]\n")
        return 2
    failed = False
    for path in paths:
        problems = check_wheel(path)
        failed |= bool(problems)
        status = "ok" if not problems else f"{len(problems)} moved seam(s)"
        sys.stdout.write(f"{Path(path).name}: {status}\n" + "".join(f"  {p}\n" for p in problems))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
