"""The message buffer's layout, shared by every transport: leaves one after another in depth-first
order, each at the previous leaf's end aligned up (leaf 0 at 0), zero padding between them, the
buffer ending at the last leaf's end. Only the alignment differs per transport (host 64, CUDA IPC
256). The layout is canonical, so a receiver checks every offset by recomputing it. Also the units a
host value may hold the buffer's bytes in (`UNITS`, `bytes_value`)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import torch

from ..errors import DecodeError
from ..layout import leaf_view
from ..wire import ReceivedLeaf

__all__ = ["layout_offsets", "check_canonical_offsets", "leaf_views", "UNITS", "bytes_value"]


def layout_offsets(nbytes: list[int], alignment: int) -> tuple[list[int], int]:
    """Canonical offsets for leaves of the given sizes, and the total buffer length."""
    mask = alignment - 1
    offsets = []
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


def leaf_views(base: torch.Tensor, leaves: list[ReceivedLeaf], offsets: list[int]) -> list[torch.Tensor]:
    """Each leaf as a tensor viewing `base` (a message buffer, host or GPU) at its offset, with its
    dtype, shape and strides (the header's checks make a refusal by torch unreachable)."""
    storage = base.untyped_storage()
    tensors = []
    for i, (leaf, start) in enumerate(zip(leaves, offsets)):
        try:
            tensors.append(leaf_view(storage, leaf.dtype, start, leaf.shape, leaf.strides))
        except RuntimeError as e:
            raise DecodeError(f"tc.header.leaves[{i}]: torch refused the layout: {e}") from None
    return tensors


# The value's bytes may come in wider units (wire-format.md, section 5): dora 1.1's send_output
# carries a UInt8 array measurably slower than the same bytes as wider integers (bench/
# dora_latency.py), so tc.send hands it the widest unsigned type that tiles the bytes.
UNITS = {pa.UInt8Array: 1, pa.UInt16Array: 2, pa.UInt32Array: 4, pa.UInt64Array: 8}
_WIDEST_FIRST = ((8, pa.uint64()), (4, pa.uint32()), (2, pa.uint16()), (1, pa.uint8()))


def bytes_value(address: int, nbytes: int, owner: Any) -> pa.Array:
    """`nbytes` (> 0) at `address` as a value without copying them: an Arrow array of the widest
    unsigned integers that tile them (the length and the address are multiples of its width),
    which keeps `owner` alive."""
    data = pa.foreign_buffer(address, nbytes, base=owner)
    for width, unit in _WIDEST_FIRST:
        if not (nbytes % width or address % width):
            return pa.Array.from_buffers(unit, nbytes // width, [None, data])
    raise AssertionError("unreachable: one byte tiles anything")
