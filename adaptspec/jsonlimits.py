"""JSON request bodies with limits: nesting depth and number length, checked before and while parsing.

    body = loads_limited(raw)      # -> object, or RequestError(400) naming the limit that was hit

The standard parser recurses once per nesting level (100,000 `[` raise RecursionError, a 500 wherever it
is not caught) and refuses ints past CPython's 4,300-digit limit with a ValueError (not a JSONDecodeError) — and huge
floats silently become inf. Both are client mistakes and must be 400s. Depth is
checked on the bracket skeleton first (strings removed, one vectorised running sum), so a deep body is
refused without any recursion; floats are checked by the parser's hook as they are read.
NaN / Infinity (accepted by `json.loads`, not JSON) are refused too.
"""

from __future__ import annotations

import json
import re

import numpy as np

from adaptspec.errors import RequestError

MAX_DEPTH = 64  # OpenAI bodies nest ~6 deep; JSON Schemas in tools / response_format rarely past 20
MAX_FLOAT_CHARS = 100  # a double needs 17 significant digits; ints are capped by CPython (4,300 digits)

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STEP = np.zeros(256, dtype=np.int32)  # bracket byte -> +1 / -1, anything else 0
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


class _Refused(ValueError):
    pass


def json_depth(raw: bytes) -> int:
    """Deepest nesting of arrays/objects in `raw` (brackets inside strings do not count)."""
    skeleton = np.frombuffer(_STRING.sub(b"", raw), dtype=np.uint8)  # [n_bytes]
    return int(np.cumsum(_STEP[skeleton]).max(initial=0))


def _float(text: str) -> float:
    if len(text) > MAX_FLOAT_CHARS:
        raise _Refused(f"a number of {len(text)} characters (the limit is {MAX_FLOAT_CHARS})")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"a number out of the double range ({text[:20]})")
    return value


def _constant(name: str) -> float:
    raise _Refused(f"{name} (not a JSON number)")


_DECODER = json.JSONDecoder(parse_float=_float, parse_constant=_constant)  # built once, not per call


def loads_limited(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> object:
    """Parse a request body; RequestError(400, code `invalid_json`) for bad JSON or a limit hit."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if raw.count(b"[") + raw.count(b"{") > max_depth and json_depth(raw) > max_depth:  # cheap counts first
        raise RequestError(f"Request body is nested deeper than {max_depth} levels.", code="invalid_json")
    try:
        return _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))  # as json.loads does
    except _Refused as exc:
        raise RequestError(f"Request body has {exc}.", code="invalid_json") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(f"Request body is not valid JSON: {exc}", code="invalid_json") from None
    except ValueError as exc:  # CPython's int limit: "Exceeds the limit (4300 digits) for integer string ..."
        raise RequestError(f"Request body has a number too large to parse ({str(exc).split(';')[0]}).",
                           code="invalid_json") from None
    except RecursionError:  # only reachable with a lowered interpreter limit; still the client's body
        raise RequestError(f"Request body is nested too deeply (limit {max_depth}).", code="invalid_json") from None
