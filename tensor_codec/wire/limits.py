"""What one message may cost (docs/wire-format.md, section 7a): the bounds a receiver holds every
header to, and the check of a message's logical sizes that both sides make. The limits in force
in a process, and how a user changes them, are tensor_codec/limits.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UsageError

__all__ = ["Limits", "check_logical_sizes"]


@dataclass(frozen=True)
class Limits:
    """Receiver-side limits of one message (each: largest accepted value)."""

    header_bytes: int = 1 << 20  # UTF-8 bytes of the tc.header text
    header_items: int = 32_768  # JSON values and member names in the header
    string_bytes: int = 256 << 10  # bytes inside the header's string literals
    leaves: int = 4096  # tensors per message
    namedtuple_fields: int = 2048  # 32 per distinct namedtuple type of one message, plus its fields
    leaf_logical_bytes: int = 4 << 30  # numel x item size of one tensor (broadcast dims count)
    message_logical_bytes: int = 16 << 30  # the same, summed over the message

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if type(value) is not int or value < 1:
                raise UsageError(f"limits.{field.name}: expected a positive integer, got {value!r}")


def check_logical_sizes(leaves: list, bounds: Limits, error: type[Exception], name: Callable[[int], str]) -> None:
    """Each tensor's and the message's logical bytes (numel x item size, broadcast dims counted:
    what a consumer that densifies it allocates) within the limits, on both sides of the wire.
    `leaves` have .shape and .dtype (.itemsize); `name(i)` names leaf i in the error."""
    total = 0
    for i, leaf in enumerate(leaves):
        logical = leaf.dtype.itemsize
        for size in leaf.shape:
            logical *= size
        if logical > bounds.leaf_logical_bytes:
            raise error(
                f"{name(i)}: expected at most {bounds.leaf_logical_bytes} logical bytes per tensor "
                f"(limits.leaf_logical_bytes; numel x item size), got {logical}"
            )
        total += logical
        if total > bounds.message_logical_bytes:
            raise error(
                f"{name(i)}: expected at most {bounds.message_logical_bytes} logical bytes per message "
                f"(limits.message_logical_bytes), got {total} up to this tensor"
            )
