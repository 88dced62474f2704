"""Regression tests for issue 14 (hostile clients, failing closed), in process with real objects.

Each test reproduces one defect found against `adaptspec serve`; HTTP cases run the real aiohttp app on
a loopback port in front of the test upstream (tests/proxy/upstream_app.py), also in process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from adaptspec.errors import ConfigError
from adaptspec.proxy.app import Proxy
from adaptspec.proxy.configfile import load_config_file
from adaptspec.proxy.reload import Reloader

POOLS = [{"name": "p", "engine": "adaptspec", "workers": [{"name": "w0", "url": "http://127.0.0.1:9"}]}]


def _write(path, server: dict) -> None:
    path.write_text(yaml.safe_dump({"pools": POOLS, "server": server}))


# -- 1. auth fails closed ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [None, "", " , ,"])
def test_unset_or_empty_key_variable_is_a_config_error_naming_it(tmp_path, monkeypatch, value):
    if value is None:
        monkeypatch.delenv("ADAPTSPEC_TEST_KEYS", raising=False)
    else:
        monkeypatch.setenv("ADAPTSPEC_TEST_KEYS", value)
    path = tmp_path / "c.yaml"
    _write(path, {"api_keys_env": "ADAPTSPEC_TEST_KEYS"})
    with pytest.raises(ConfigError) as exc:
        Proxy(load_config_file(path), config_path=str(path))
    assert "ADAPTSPEC_TEST_KEYS" in str(exc.value) and "server.api_keys_env" in str(exc.value)
    assert str(path) in str(exc.value)


async def test_reload_naming_an_unset_key_variable_keeps_the_last_good_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTSPEC_TEST_KEYS", "k1,k2")
    monkeypatch.delenv("ADAPTSPEC_TEST_OTHER", raising=False)
    path = tmp_path / "c.yaml"
    _write(path, {"api_keys_env": "ADAPTSPEC_TEST_KEYS"})
    proxy = Proxy(load_config_file(path), config_path=str(path))
    assert proxy.api_keys == {"k1", "k2"}
    reloader = Reloader(proxy, str(path), load_config_file, poll_s=0)
    _write(path, {"api_keys_env": "ADAPTSPEC_TEST_OTHER"})
    assert await reloader.reload("test") is False
    assert proxy.api_keys == {"k1", "k2"}
    assert proxy.config.server.api_keys_env == "ADAPTSPEC_TEST_KEYS"
    _write(path, {})  # dropping the key variable on purpose is allowed
    assert await reloader.reload("test") is True
    assert proxy.api_keys == frozenset()


@pytest.mark.integration
def test_serve_refuses_to_start_without_its_keys(tmp_path):
    path = tmp_path / "c.yaml"
    _write(path, {"api_keys_env": "ADAPTSPEC_TEST_KEYS_UNSET"})
    env = {k: v for k, v in os.environ.items() if k != "ADAPTSPEC_TEST_KEYS_UNSET"}
    out = subprocess.run([sys.executable, "-m", "adaptspec", "serve", "--port", "0", "--config", str(path)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1
    assert "ADAPTSPEC_TEST_KEYS_UNSET" in out.stderr and "server.api_keys_env" in out.stderr
