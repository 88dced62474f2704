"""Config files for `adaptspec serve`: `${VAR}` / `${VAR:-default}` expansion, then the control schema.

    pools:
      - name: up
        engine: openai
        workers: [{name: u0, url: "${UPSTREAM_URL}"}]

Expansion happens in the text before YAML parsing, so any value can come from the environment; an
unset variable without a default is a ConfigError naming the file and the variable. `$$` is a literal
`$`. Files without `${` are read as they are. Either way `adaptspec.control.config.load_config` parses
and checks the result (duplicate keys, relative profile paths) exactly as for any config file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from adaptspec.control.config import Config, load_config
from adaptspec.errors import ConfigError

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(text: str, source: str, env: dict[str, str] | None = None) -> str:
    env = os.environ if env is None else env

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, default = m.group(1), m.group(2)
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                line = text.count("\n", 0, m.start()) + 1
                raise ConfigError(f"environment variable is not set (line {line})", file=source,
                                  key=f"${{{name}}}")
            return default
        return value

    return _VAR.sub(sub, text)


def load_config_file(path: str | Path) -> Config:
    source = str(path)
    return load_config(path, lambda text: expand_env(text, source) if "${" in text else text)
