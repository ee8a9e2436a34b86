"""The codec's exception hierarchy: one root (`CodecError`) so callers can catch everything the
codec raises, and subclasses that also derive from the matching built-in (the pyarrow pattern), so
``except TypeError`` / ``except ValueError`` keep working for callers that do not know this
package. Messages name *where* (a path into the structure, msgspec-style ``$.boxes[2]``, or a
header field), *what was expected* and *what came*.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CodecError",
    "EncodeError",
    "DecodeError",
    "MessageTooLargeError",
    "SharedViewWriteError",
    "ReleasedError",
    "InFlightLimitError",
    "UsageError",
    "format_path",
    "Where",
]


class CodecError(Exception):
    """Root of every error raised by tensor_codec."""


class EncodeError(CodecError, TypeError):
    """The object cannot be encoded (unsupported type, dtype, layout or value)."""


class DecodeError(CodecError, ValueError):
    """A received message is malformed, inconsistent or not a tensor_codec message."""


class MessageTooLargeError(CodecError, ValueError):
    """The message is over a limit of dora's on every route it can take from this node; the text
    names the limit hit and what lifts it (`tensor_codec.max_send_bytes` says how much goes)."""


class SharedViewWriteError(CodecError, RuntimeError):
    """A zero-copy view of a received message was written in place: it shares memory with the
    sender and every other receiver of the message, whose reads it corrupts (docs/api.md, 5)."""


class ReleasedError(CodecError, RuntimeError):
    """A received object was used (kept, released) after its message had been released."""


class InFlightLimitError(CodecError, TimeoutError):
    """A zero-copy send found its output's bytes in flight at the cap and room did not come back
    within the timeout (receivers too slow, or holding on to what they got)."""


class UsageError(CodecError, ValueError, TypeError):
    """An argument or setting given to the codec is invalid (a ``device=``, an ``ipc_configure``
    value, a ``TC_*`` environment variable, a limit). Both ``except ValueError`` and
    ``except TypeError`` catch it, whichever a caller expects for a bad argument."""


def some_keys(keys: Any, shown: int = 8) -> str:
    """Keys for an error message: sorted, each cut to 40 characters, at most `shown` of them,
    then how many more ("['a', 'b', ... (12 more)]"): a hostile dict may hold thousands, and a list
    cut short without saying so reads as the whole of it."""
    names = sorted(str(k)[:40] for k in keys)
    more = f", ... ({len(names) - shown} more)" if len(names) > shown else ""
    return "[" + ", ".join(repr(name) for name in names[:shown]) + more + "]"


def format_path(parts: tuple | list) -> str:
    """``("boxes", 2, "xy")`` -> ``$.boxes[2].xy``; keys that are not identifiers are quoted."""
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif isinstance(part, str) and part.isidentifier():
            out.append(f".{part}")
        else:
            out.append(f"[{part!r}]")
    return "".join(out)


class Where(tuple):
    """A place in a received message, e.g. ``tc.header.tree.items[3][1]``, rendered only when an
    error prints it: validating a node costs O(1) whatever its depth. ``Where((parent, template,
    arg))``: `parent` is a string or a Where, `template` is formatted with `arg`. A tuple, so
    making one runs no Python code (a validator makes one per container node)."""

    __slots__ = ()

    def __str__(self) -> str:
        parts = []
        node: object = self
        while type(node) is Where:
            parent, template, arg = node
            parts.append(template.format(arg))
            node = parent
        parts.append(str(node))
        return "".join(reversed(parts))

    __repr__ = __str__
