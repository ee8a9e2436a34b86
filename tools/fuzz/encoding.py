"""Plain-data <-> JSON text, without pickle: how cases travel between the fuzzer's processes and
how reproducers are written to disk.

A case is built from JSON-like data plus a few Python types JSON lacks. Those are written as a
one-key object whose key starts with ``$``:

* ``{"$bytes": "<base64>"}``  bytes (and bytearray, which comes back as bytes);
* ``{"$float": "nan" | "inf" | "-inf"}``  non-finite floats (finite ones are JSON numbers; Python
  writes them with `repr`, which reads back bit-exactly, -0.0 included);
* ``{"$tuple": [...]}``  a tuple;
* ``{"$dict": [[key, value], ...]}``  a dict whose keys are not all strings, or where a key
  starts with ``$`` (so no plain object is ever mistaken for one of these tags).

Strings that are not valid UTF-8 (lone surrogates) survive: the text is written with
``ensure_ascii=True``, which escapes them as ``\\udXXX``. Integers of any size are JSON integers.
Only these types are accepted; anything else is a programming error of the fuzzer (TypeError).
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

__all__ = ["to_plain", "from_plain", "dumps", "loads"]


def to_plain(x: Any) -> Any:
    """A JSON-serializable copy of `x` (see module doc for the tags)."""
    tx = type(x)
    if x is None or tx is bool or tx is str or tx is int:
        return x
    if tx is float:
        if math.isfinite(x):
            return x
        return {"$float": "nan" if x != x else ("inf" if x > 0 else "-inf")}
    if tx is bytes or tx is bytearray:
        return {"$bytes": base64.b64encode(bytes(x)).decode("ascii")}
    if tx is list:
        return [to_plain(v) for v in x]
    if tx is tuple:
        return {"$tuple": [to_plain(v) for v in x]}
    if tx is dict:
        if all(type(k) is str and not k.startswith("$") for k in x):
            return {k: to_plain(v) for k, v in x.items()}
        return {"$dict": [[to_plain(k), to_plain(v)] for k, v in x.items()]}
    raise TypeError(f"tools.fuzz.encoding: cannot write {tx.__module__}.{tx.__qualname__}")


def from_plain(x: Any) -> Any:
    """The inverse of `to_plain`."""
    tx = type(x)
    if tx is list:
        return [from_plain(v) for v in x]
    if tx is dict:
        if len(x) == 1:
            ((key, value),) = x.items()
            if key == "$bytes":
                return base64.b64decode(value, validate=True)
            if key == "$float":
                return float(value)
            if key == "$tuple":
                return tuple(from_plain(v) for v in value)
            if key == "$dict":
                return {from_plain(k): from_plain(v) for k, v in value}
        return {k: from_plain(v) for k, v in x.items()}
    return x


def dumps(x: Any, indent: int | None = None) -> str:
    return json.dumps(to_plain(x), ensure_ascii=True, allow_nan=False, indent=indent)


def loads(text: str | bytes) -> Any:
    return from_plain(json.loads(text))
