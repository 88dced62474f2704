"""The worker's tokenizer: a `tokenizers` fast tokenizer plus the HF chat template, read from a model dir.

Reads `tokenizer.json`, `tokenizer_config.json` (special tokens, `chat_template`) and, when present,
`generation_config.json` (`eos_token_id`, one id or a list). The chat template is rendered with jinja2 in
a sandbox, the way `transformers` does (`messages`, `add_generation_prompt`, special-token variables,
`raise_exception`).

    tok = Tokenizer.from_dir("adaptspec/assets/tiny-target")
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Hi"}]))
    text = tok.decode(ids)
"""

from __future__ import annotations

import json
from pathlib import Path

from adaptspec.errors import ModelLoadError

__all__ = ["Tokenizer"]


def _token_str(v) -> str | None:
    if isinstance(v, dict):
        return v.get("content")
    return v


class Tokenizer:
    def __init__(self, tok, config: dict, eos_token_ids: list[int]):
        self._tok = tok
        self.config = config
        self.chat_template: str | None = config.get("chat_template")
        self.bos_token = _token_str(config.get("bos_token"))
        self.eos_token = _token_str(config.get("eos_token"))
        self.pad_token = _token_str(config.get("pad_token"))
        self.eos_token_ids = eos_token_ids
        self.vocab_size = tok.get_vocab_size()
        self._template = None

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        from tokenizers import Tokenizer as FastTokenizer

        path = Path(path)
        try:
            tok = FastTokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as e:  # tokenizers raises a bare Exception on a bad file
            raise ModelLoadError(f"cannot load {path / 'tokenizer.json'}: {e}") from e
        cfg_path = path / "tokenizer_config.json"
        config = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
        eos: list[int] = []
        gen_path = path / "generation_config.json"
        if gen_path.exists():
            e = json.loads(gen_path.read_text()).get("eos_token_id")
            eos = [e] if isinstance(e, int) else list(e or [])
        eos_tok = _token_str(config.get("eos_token"))
        if eos_tok is not None and tok.token_to_id(eos_tok) is not None and tok.token_to_id(eos_tok) not in eos:
            eos.append(tok.token_to_id(eos_tok))
        return cls(tok, config, eos)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def max_token_chars(self) -> int:
        """Characters in the longest vocabulary entry: a text of n characters has >= n / this many tokens."""
        return max((len(t) for t in self._tok.get_vocab()), default=1)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **kwargs) -> str:
        """Render `messages` ([{"role", "content"}]) to the prompt text the model expects."""
        if not self.chat_template:
            raise ModelLoadError("this tokenizer has no chat_template")
        if self._template is None:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message):
                raise ValueError(message)

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = raise_exception
            self._template = env.from_string(self.chat_template)
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                     bos_token=self.bos_token or "", eos_token=self.eos_token or "",
                                     pad_token=self.pad_token or "", **kwargs)
