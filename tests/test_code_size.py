"""Issue 33's limits, read from the source: no module in `adaptspec/` over 600 lines, no function or method over
80 (its `def` line to its last line, decorators aside), and no `getattr` / `hasattr` probe of a policy or a
policy section: a capability is declared (control/policy_base.py, control/config.py `_Experiments`) and read."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "adaptspec"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# an identifier that names a policy: policy, pol, cfg.policy, spec.policy, self.policy(), inner_policy, ...
POLICY_NAME = re.compile(r"(?:\w*_)?pol(?:icy|icies)?(?:_\w*)?", re.IGNORECASE)


def _modules(root: Path) -> list[tuple[str, str]]:
    return [(str(p.relative_to(root.parent)), p.read_text()) for p in sorted(root.rglob("*.py"))]


def long_modules(modules: list[tuple[str, str]]) -> list[str]:
    return [f"{name}: {n} lines" for name, text in modules if (n := len(text.splitlines())) > MAX_MODULE_LINES]


def long_functions(modules: list[tuple[str, str]]) -> list[str]:
    out = []
    for name, text in modules:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{name}:{node.lineno} {node.name}: {n} lines")
    return out


def _names(node: ast.AST) -> list[str]:
    return [n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))]


def policy_probes(modules: list[tuple[str, str]]) -> list[str]:
    out = []
    for name, text in modules:
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args
                    and any(POLICY_NAME.fullmatch(n) for n in _names(node.args[0]))):
                out.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return out


def test_no_module_is_over_600_lines():
    assert long_modules(_modules(PACKAGE)) == []


def test_no_function_is_over_80_lines():
    assert long_functions(_modules(PACKAGE)) == []


def test_no_policy_is_probed_with_getattr():
    assert policy_probes(_modules(PACKAGE)) == []


def test_the_scans_name_the_offenders():
    body = "\n".join(f"    x = {i}" for i in range(80))
    source = (f"def long():\n{body}\n"  # 81 lines
              "def short():\n    return 1\n"
              "class C:\n    async def method(self):\n" + body.replace("    ", "        ") + "\n")
    modules = [("adaptspec/m.py", source), ("adaptspec/big.py", "x = 1\n" * 601), ("adaptspec/ok.py", "x = 1\n" * 600)]
    assert long_modules(modules) == ["adaptspec/big.py: 601 lines"]
    assert long_functions(modules) == ["adaptspec/m.py:1 long: 81 lines", "adaptspec/m.py:85 method: 81 lines"]
    probes = ("getattr(cfg.policy, 'default_profile', None)\ngetattr(spec.policy, 'proposer', None)\n"
              "hasattr(pol, 'x')\ngetattr(self.policy(), 'y')\ngetattr(inner_policy, 'z', 0)\n"
              "getattr(args, 'policy', None)\ngetattr(polish, 'x')\ngetattr(cfg.server, 'host', None)\n")
    assert [p.split(" ", 1)[0] for p in policy_probes([("adaptspec/p.py", probes)])] == [
        "adaptspec/p.py:1", "adaptspec/p.py:2", "adaptspec/p.py:3", "adaptspec/p.py:4", "adaptspec/p.py:5"]
