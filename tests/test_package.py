import subprocess
import sys

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
