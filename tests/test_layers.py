"""The layering (docs: DESIGN.md "Layers"), read from the source: every import statement of every module,
those inside functions included, so that a lazy import cannot hide a dependency that points up."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "adaptspec"
# package -> the adaptspec packages it must never import
FORBIDDEN = {
    "control": ("adaptspec.proxy", "adaptspec.worker", "adaptspec.bench", "adaptspec.integrations", "adaptspec.cli"),
    "bench": ("adaptspec.proxy",),  # measurement code: metric parsing and names come from control
}


def imported(path: Path) -> set[str]:
    """Every module an import statement of `path` names (`from a import b`: a and a.b), relative ones resolved."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def offending(package: str) -> list[str]:
    bad = FORBIDDEN[package]
    return [f"{path.relative_to(PACKAGE.parent)}: {name}"
            for path in sorted((PACKAGE / package).rglob("*.py"))
            for name in sorted(imported(path)) if name in bad or name.startswith(tuple(b + "." for b in bad))]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_from_the_layers_above(package):
    assert offending(package) == []


def test_the_scan_sees_lazy_relative_and_from_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "adaptspec" / "bench"
    pkg.mkdir(parents=True)
    (pkg / "m.py").write_text("def f():\n    from ..proxy import scrape\n"
                              "import adaptspec.proxy.app\nfrom adaptspec import proxy\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "adaptspec")
    assert offending("bench") == ["adaptspec/bench/m.py: adaptspec.proxy",
                                  "adaptspec/bench/m.py: adaptspec.proxy.app",
                                  "adaptspec/bench/m.py: adaptspec.proxy.scrape"]


def test_the_proposer_vocabulary_is_written_once():
    """Every list of (nearly) all proposer names is control/types.py's: a tuple, list, set or Literal of
    string constants naming four or more of them anywhere else is a copy that can drift."""
    from adaptspec.control.types import PROPOSERS

    copies = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "control" / "types.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else ()
            names = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in PROPOSERS}
            if len(names) >= 4:
                copies.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert copies == []


def upstream_senders(root: Path) -> list[str]:
    """Where a proxied request is sent upstream: calls of the hop client's `post` (`<x>.h1.post(...)`)."""
    return [f"{path.relative_to(root.parent)}:{node.lineno}"
            for path in sorted((root / "proxy").rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "post"
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "h1"]


def test_one_relay_sends_every_proxied_request():
    """Generation (handlers.py) and pass-through (passthrough.py) both go through proxy/relay.py `dispatch`: the
    hop client is called from there only, so retries, ejection and relaying are written once."""
    senders = upstream_senders(PACKAGE)
    assert [s.split(":")[0] for s in senders] == ["adaptspec/proxy/relay.py"]
    for caller in ("handlers.py", "passthrough.py"):
        assert "relay.dispatch(" in (PACKAGE / "proxy" / caller).read_text()
