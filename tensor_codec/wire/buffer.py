"""The message buffer (docs/wire-format.md, sections 5 and 5a): where each leaf lies (only the
alignment differs per transport), the zero padding between leaves, and the Arrow types of a host
message's value. The layout is canonical, so a receiver checks every offset by recomputing it,
and the padding by reading it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import DecodeError
from .header import ReceivedLeaf

__all__ = [
    "KEY_GPU",
    "HOST_ALIGNMENT",
    "CUDA_IPC_ALIGNMENT",
    "layout_offsets",
    "check_canonical_offsets",
    "Padding",
    "UNIT_TYPES",
    "UNITS",
    "UNIT_NAMES",
    "check_value",
]

KEY_GPU = "gpu"  # the host transport's optional header key: the GPU receivers restore onto (section 5)

HOST_ALIGNMENT = 64  # what Arrow's and torch's allocators give: a received buffer is viewed in place
CUDA_IPC_ALIGNMENT = 256  # every dtype's alignment; the caching allocator's granularity is a multiple


def layout_offsets(nbytes: list[int], alignment: int) -> tuple[list[int], int]:
    """Canonical offsets for leaves of the given sizes, and the total buffer length."""
    mask = alignment - 1
    offsets: list[int] = []
    end = 0
    for n in nbytes:
        start = (end + mask) & ~mask if offsets else 0
        offsets.append(start)
        end = start + n
    return offsets, end


def check_canonical_offsets(leaves: list[ReceivedLeaf], alignment: int) -> tuple[list[int], int]:
    """-> (offsets, total length), after checking each leaf's `offset` is the canonical one."""
    offsets, total = layout_offsets([leaf.nbytes for leaf in leaves], alignment)
    for i, (leaf, expected) in enumerate(zip(leaves, offsets)):
        got = leaf.fields["offset"]
        if type(got) is not int or got != expected:
            raise DecodeError(
                f"tc.header.leaves[{i}].offset: expected {expected} (previous leaf's end aligned "
                f"to {alignment} bytes), got {got!r:.80}"
            )
    return offsets, total


# The value's Arrow types (docs/wire-format.md, section 5, says which each writer makes): its bytes
# are the buffer's bytes whatever the type, and offsets count in its units.
UNIT_TYPES = (
    pa.uint8(),
    pa.int8(),
    pa.uint16(),
    pa.int16(),
    pa.float16(),
    pa.uint32(),
    pa.int32(),
    pa.float32(),
    pa.uint64(),
    pa.int64(),
    pa.float64(),
)
UNITS = {type(pa.array([], unit)): unit.bit_width >> 3 for unit in UNIT_TYPES}  # array class -> width
UNIT_NAMES = ", ".join(map(str, UNIT_TYPES))  # as Arrow names them, and errors name what came

_ZEROS = bytes(max(HOST_ALIGNMENT, CUDA_IPC_ALIGNMENT))


class Padding:
    """Where the padding between leaves lies, and the check that it is zero (wire-format.md 5 says
    why). At most the alignment - 1 bytes per leaf: a few gaps are compared one by one (memcmp
    through a memoryview), many in one numpy gather over positions worked out once per header."""

    _ONE_BY_ONE = 64  # measured: a memoryview compare costs ~0.35 us a gap, the numpy gather ~10 us plus 0.1 a gap

    def __init__(self, leaves: list[ReceivedLeaf], offsets: list[int]):
        self.gaps = []  # (leaf index, start, end)
        for i in range(1, len(offsets)):
            end = offsets[i - 1] + leaves[i - 1].nbytes
            if offsets[i] > end:
                self.gaps.append((i, end, offsets[i]))
        self.positions = None
        if len(self.gaps) > self._ONE_BY_ONE:
            self.positions = np.concatenate([np.arange(start, end) for _, start, end in self.gaps])

    def check(self, buffer: pa.Buffer, base: int) -> None:
        if self.positions is not None and not np.frombuffer(buffer, dtype=np.uint8)[base:][self.positions].any():
            return
        data = memoryview(buffer).cast("B")  # unsigned bytes: compared with memcmp
        for i, start, end in self.gaps:  # a few gaps, or finding which one is not zero
            if data[base + start : base + end] != _ZEROS[: end - start]:
                raise DecodeError(
                    f"value: expected zero padding before tc.header.leaves[{i}] (bytes {start}..{end}), got non-zero "
                    "bytes"
                )


def check_value(value: Any, total: int) -> int:
    """The Arrow value must be exactly what the header describes. -> its unit in bytes."""
    width = UNITS.get(type(value), 0)
    if width and len(value) * width == total and not (total and value.null_count):
        return width  # every message that is right: one lookup for the class and the Arrow type
    if not isinstance(value, pa.Array):
        raise DecodeError(
            f"value: expected a pyarrow.Array of {UNIT_NAMES}, got {type(value).__module__}.{type(value).__qualname__}"
        )
    if not width:
        raise DecodeError(f"value: expected Arrow type {UNIT_NAMES}, got {value.type}")
    if len(value) * width != total:
        raise DecodeError(f"value: expected {total} bytes (the end of the last leaf), got {len(value) * width}")
    raise DecodeError(f"value: expected no nulls, got {value.null_count}")
