"""The SGLang names adaptspec relies on, checked from a release's wheel without importing SGLang.

The proxy scrapes SGLang's `/metrics` by name (every `sglang:*` name in control/metric_names.py) and
`adaptspec launch sglang` writes `sglang.launch_server` flags (integrations/sglang.py). A release that renames a
gauge would leave a pool's occupancy or acceptance silently at zero; one that renames a flag would refuse to start.
So the pinned release (`PINNED_SGLANG` in integrations/sglang.py) is read from its wheel
(`pip download sglang==X --no-deps`, ~40 MB; installing it would pull a CUDA stack):

- metric names: the string literals `"sglang:..."` of `sglang/srt/observability/` (where prometheus_client
  registers them; a counter registered as `x_total` is `x` in metric_names, as prometheus_client strips it);
- launch flags: the fields of `sglang/srt/arg_groups/fields/*.py`, which SGLang turns into `--field-name` flags
  (plus each `Arg(aliases=[...])`, minus `Arg(no_cli=True)`), and the flags `server_args.py` adds by hand;
- speculative algorithms: the members of `SpeculativeAlgorithm` (`sglang/srt/speculative/spec_info.py`).

    python -m adaptspec.integrations.sglang_seams sglang-0.5.23-*.whl      # prints problems, exit 1 if any
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from adaptspec.control import metric_names

OBSERVABILITY = "sglang/srt/observability/"
FIELDS = "sglang/srt/arg_groups/fields/"
SERVER_ARGS = "sglang/srt/server_args.py"
SPEC_INFO = "sglang/srt/speculative/spec_info.py"

_METRIC = re.compile(r"""["'](sglang:[A-Za-z0-9_:]+)["']""")
_ADDED_FLAG = re.compile(r"""add_argument\(\s*["'](--[A-Za-z0-9-]+)["']""")


def scraped_metrics() -> dict[str, str]:
    """Every SGLang metric name adaptspec reads: {constant name in metric_names: metric name}."""
    return {k: v for k, v in vars(metric_names).items()
            if k.startswith("SGLANG_") and isinstance(v, str) and v.startswith("sglang:")}


def launch_flags() -> set[str]:
    """Every flag `adaptspec launch sglang` can write: the command lines of a pool of each algorithm."""
    from adaptspec.integrations.sglang import VALID_ALGORITHMS, sglang_commands

    flags: set[str] = set()
    for algorithm in VALID_ALGORITHMS:
        pool = {"name": "p", "per_request": False, "proposers": ["eagle"], "gamma": 3,
                "workers": [{"name": "w", "url": "http://127.0.0.1:30000"}],
                "launch": {"model": "m", "draft_model": "d", "algorithm": algorithm}}
        for cmd in sglang_commands(pool):
            flags.update(a for a in cmd.argv if a.startswith("--"))
    return flags


def _arg_meta(annotation: ast.expr) -> ast.expr | None:
    """The metadata of `A[T, meta]` / `Annotated[T, meta]` (None for any other annotation)."""
    if not isinstance(annotation, ast.Subscript) or not isinstance(annotation.slice, ast.Tuple):
        return None
    head = annotation.value
    name = head.id if isinstance(head, ast.Name) else head.attr if isinstance(head, ast.Attribute) else ""
    if name not in ("A", "Annotated") or len(annotation.slice.elts) < 2:
        return None
    return annotation.slice.elts[1]


def field_flags(source: str) -> set[str]:
    """The CLI flags SGLang derives from the annotated fields of one `arg_groups/fields` module."""
    flags: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                continue
            meta = _arg_meta(item.annotation)
            if meta is None:
                continue
            names = ["--" + item.target.id.replace("_", "-")]
            if isinstance(meta, ast.Call):
                kw = {k.arg: k.value for k in meta.keywords}
                if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
                    continue
                if isinstance(kw.get("cli_name"), ast.Constant):
                    names = [kw["cli_name"].value]
                if isinstance(kw.get("aliases"), (ast.List, ast.Tuple)):
                    names += [e.value for e in kw["aliases"].elts if isinstance(e, ast.Constant)]
            elif not (isinstance(meta, ast.Constant) and isinstance(meta.value, str)):
                continue
            flags.update(names)
    return flags


def enum_members(source: str, cls: str) -> set[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {t.id for item in node.body if isinstance(item, ast.Assign)
                    for t in item.targets if isinstance(t, ast.Name)}
    return set()


def check_sources(files: Mapping[str, str]) -> list[str]:
    """Problems of a release given its sources ({path in the wheel: text}); [] when every name is there."""
    problems = []
    metrics = {m for path, text in files.items() if path.startswith(OBSERVABILITY) for m in _METRIC.findall(text)}
    for const, name in sorted(scraped_metrics().items()):
        if name not in metrics and metric_names.total(name) not in metrics:
            problems.append(f"metric {name} (metric_names.{const}): not registered under {OBSERVABILITY}")
    flags = {f for path, text in files.items() if path.startswith(FIELDS) for f in field_flags(text)}
    flags |= set(_ADDED_FLAG.findall(files.get(SERVER_ARGS, "")))
    for flag in sorted(launch_flags()):
        if flag not in flags:
            problems.append(f"launch flag {flag}: no such sglang.launch_server argument")
    from adaptspec.integrations.sglang import VALID_ALGORITHMS

    members = enum_members(files.get(SPEC_INFO, ""), "SpeculativeAlgorithm")
    for algorithm in VALID_ALGORITHMS:
        if algorithm not in members:
            problems.append(f"--speculative-algorithm {algorithm}: not a SpeculativeAlgorithm in {SPEC_INFO}")
    return problems


def wheel_sources(wheel: str | Path) -> dict[str, str]:
    """The wheel's files the check reads."""
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n).decode("utf-8", "replace") for n in z.namelist()
                if n.endswith(".py") and (n.startswith((OBSERVABILITY, FIELDS)) or n in (SERVER_ARGS, SPEC_INFO))}


def check_wheel(wheel: str | Path) -> list[str]:
    return check_sources(wheel_sources(wheel))


def wheel_version(wheel: str | Path) -> str:
    """'0.5.23' from sglang-0.5.23-cp311-...whl."""
    return Path(wheel).name.split("-")[1]


def main(argv: Iterable[str] | None = None) -> int:
    wheels = list(argv if argv is not None else sys.argv[1:])
    if not wheels:
        sys.stderr.write("usage: python -m adaptspec.integrations.sglang_seams SGLANG_WHEEL...\n")
        return 2
    bad = 0
    for wheel in wheels:
        problems = check_wheel(wheel)
        sys.stdout.write(f"{wheel}: {'ok' if not problems else f'{len(problems)} problem(s)'}\n")
        for p in problems:
            sys.stdout.write(f"  {p}\n")
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
