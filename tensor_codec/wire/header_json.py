"""The header's JSON text (docs/wire-format.md, sections 2 and 7a): its cost, counted on the raw
text with C-speed string operations before it is parsed (`check_cost`), and strict parsing where
Python's json is lax (it keeps the last of a member named twice silently, and turns an escaped
lone surrogate into a str no UTF-8 can carry).
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

import numpy as np

from ..errors import DecodeError, EncodeError
from .limits import Limits
from .structure import MAX_DEPTH

__all__ = [
    "MAX_NESTING",
    "measure",
    "nesting",
    "check_cost",
    "parse",
    "parse_last_member",
    "lone_surrogate",
    "describe_surrogate",
]

# The encoder's deepest header nests 3 JSON levels per structure level (a dict node, its items
# list, a [key, node] pair) plus the header object and a leaf's attributes: 3 * MAX_DEPTH + 3.
# A fixed bound above that, far below any interpreter's own recursion guard.
MAX_NESTING = 4 * MAX_DEPTH


class HeaderCost(NamedTuple):
    items: int
    string_bytes: int


_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, a pair is one character: any of these is lone


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate of `text` (a code point UTF-8 cannot carry), or None."""
    if text.isascii():  # O(1) in CPython: the common case costs nothing
        return None
    found = _SURROGATE.search(text)
    return found.group() if found else None


def describe_surrogate(text: str, surrogate: str) -> str:
    """``a lone surrogate U+D800 in 'ab\\ud800'``: for error messages (`text` shortened)."""
    return f"a lone surrogate U+{ord(surrogate):04X} in {text!r:.80}"


def _utf8_bytes(text: str) -> int:
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 text carries one
        raise DecodeError("tc.header: expected UTF-8 text, got a lone surrogate code point") from None


def _structure_count(text: str) -> int:
    return text.count("[") + text.count("{") + text.count(",") + text.count(":")


def _outside_strings(text: str) -> tuple[str, int]:
    """-> (the text with each string literal replaced by the placeholder 0, how many there were).
    A placeholder keeps ``["x"]`` from reading as the empty container ``[]``."""
    if "\\" in text:
        # Escaped backslashes first, then escaped quotes: what is left of `"` delimits strings.
        text = text.replace("\\\\", "").replace('\\"', "")
    pieces = text.split('"')[0::2]
    return "0".join(pieces), len(pieces) - 1


def measure(text: str) -> HeaderCost:
    """The exact cost of a header text, counted as docs/wire-format.md, section 7a, says."""
    nbytes = _utf8_bytes(text)
    outside, strings = _outside_strings(text)
    items = 1 + _structure_count(outside) - outside.count("[]") - outside.count("{}")
    return HeaderCost(items, nbytes - (len(outside) - strings))


# bytes.translate deletes every byte but the four brackets (C speed); of those, bit 1 tells an
# opener ("[" 0x5B, "{" 0x7B) from a closer ("]" 0x5D, "}" 0x7D).
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nesting(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside string literals (0 for a scalar)."""
    outside, _ = _outside_strings(text)
    brackets = outside.encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
    steps = (np.frombuffer(brackets, np.uint8) & 2).astype(np.int32) - 1  # +1 opener, -1 closer
    return max(int(np.cumsum(steps).max(initial=0)), 0)


def _over(text: str, limits: Limits) -> str | None:
    """What the text exceeds, described, or None."""
    if len(text) > limits.header_bytes:  # characters <= UTF-8 bytes: decided without encoding
        return f"expected at most {limits.header_bytes} bytes, got {len(text)} characters or more"
    nbytes = _utf8_bytes(text)
    if nbytes > limits.header_bytes:
        return f"expected at most {limits.header_bytes} bytes, got {nbytes}"
    # Every item takes one character at least, and nesting one bracket: a text shorter than
    # those limits is within them uncounted (most headers, and every one on a message's path).
    if (len(text) > limits.header_items and 1 + _structure_count(text) > limits.header_items) or (
        nbytes > limits.string_bytes
    ):
        # Past the cheap bound (a header near a limit): the exact counts decide.
        cost = measure(text)
        if cost.items > limits.header_items:
            return f"expected at most {limits.header_items} items (JSON values and member names), got {cost.items}"
        if cost.string_bytes > limits.string_bytes:
            return f"expected at most {limits.string_bytes} bytes in string literals, got {cost.string_bytes}"
    if len(text) > MAX_NESTING and text.count("[") + text.count("{") > MAX_NESTING:  # else none is deeper
        depth = nesting(text)
        if depth > MAX_NESTING:
            return f"expected at most {MAX_NESTING} nesting levels of JSON arrays and objects, got {depth}"
    return None


def check_cost(text: str, limits: Limits, sending: bool = False) -> None:
    """A header text's cost within `limits`: a sender (`sending`) refuses what its receivers would."""
    problem = _over(text, limits)
    if problem and sending:
        raise EncodeError(f"structure too large at `$`: header {problem} (tensor_codec.set_limits raises the limits)")
    if problem:
        raise DecodeError(f"tc.header: {problem} (tensor_codec.set_limits raises the limits)")


def _reject_constant(name: str):
    raise DecodeError(f"tc.header: expected strict JSON, got the non-standard constant {name}")


def _unique_members(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for name, _ in pairs:
            if name in seen:
                raise DecodeError(f"tc.header: expected each member name once per object, got {name!r:.80} twice")
            seen.add(name)
    return obj


def _int64_text(text: str) -> int:
    # Converting a number of n digits costs O(n^2): 250 numbers of 4,000 digits (1 MiB) took
    # 90 ms. An int64 has at most 19 digits and a sign; anything longer is refused unconverted.
    if len(text) > 20:
        raise DecodeError(
            f"tc.header: expected integers within int64 (at most 19 digits), got one of {len(text)} characters"
        )
    return int(text)


# One decoder, made once (json.loads with options builds a new one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_unique_members, parse_int=_int64_text)


def parse(text: str) -> Any:
    """Strict JSON -> Python objects; DecodeError naming the problem."""
    try:
        header = _DECODER.decode(text)
    except DecodeError:
        raise
    except (ValueError, RecursionError) as e:
        raise DecodeError(f"tc.header: expected valid JSON, got a parse error: {str(e)[:200]}") from None
    # Only an escape makes a surrogate in ASCII text (raw ones were refused as not UTF-8): a
    # header without "\\ud" is not searched. A one-character test first: memchr, ~15 ns, where
    # looking for "\\ud" costs ~130 ns per header (the encoder writes no backslash in most).
    if "\\" in text and ("\\ud" in text or "\\uD" in text):
        _refuse_surrogates(header)
    return header


def parse_last_member(text: str, start: int) -> tuple[Any] | None:
    """``(value,)`` for the value that starts at `start` when it runs to the text's closing
    brace (the header's last member, as the encoder writes it), parsed as strictly as `parse`;
    None when the text is anything else, or holds an escaped surrogate: the whole-text parse
    then reads it, and names any problem."""
    if "\\" in text and ("\\ud" in text or "\\uD" in text):
        return None
    try:
        value, end = _DECODER.raw_decode(text, start)
    except (DecodeError, ValueError, RecursionError):
        return None
    return (value,) if end == len(text) - 1 and text[end] == "}" else None


def _refuse_surrogates(header: Any) -> None:
    """DecodeError naming the first field of `header` whose text holds a lone surrogate."""
    todo: list[tuple[Any, str]] = [(header, "tc.header")]
    while todo:
        value, where = todo.pop()
        if type(value) is str:
            found = lone_surrogate(value)
            if found:
                raise DecodeError(f"{where}: expected UTF-8 text, got {describe_surrogate(value, found)}")
        elif type(value) is list:
            todo.extend((item, f"{where}[{i}]") for i, item in reversed(list(enumerate(value))))
        elif type(value) is dict:
            for name in value:
                found = lone_surrogate(name)
                if found:
                    raise DecodeError(f"{where}: expected UTF-8 member names, got {describe_surrogate(name, found)}")
            todo.extend((item, _member(where, name)) for name, item in reversed(list(value.items())))


def _member(where: str, name: str) -> str:
    return f"{where}.{name}" if name.isidentifier() else f"{where}[{name!r:.40}]"
