"""A message buffer's bytes as tensors and as Arrow values, without copying (what the buffer and
the value must be is the wire format's: wire/buffer.py)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import torch

from ..errors import DecodeError
from ..layout import leaf_view
from ..wire.header import ReceivedLeaf

__all__ = ["leaf_views", "value_of", "view_of"]


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


# The Arrow types tc.send gives a one-leaf value (`value_of`): its dtype's where Arrow has it, 2
# bytes wide or more, else the widest unsigned unit that tiles it (docs/transports.md, "Host bytes
# through dora", says why each; the types a value may hold: wire/buffer.py).
_WIDEST_FIRST = ((8, pa.uint64()), (4, pa.uint32()), (2, pa.uint16()), (1, pa.uint8()))
_ARROW_TYPE = {
    torch.int16: pa.int16(),
    torch.uint16: pa.uint16(),
    torch.float16: pa.float16(),
    torch.int32: pa.int32(),
    torch.uint32: pa.uint32(),
    torch.float32: pa.float32(),
    torch.int64: pa.int64(),
    torch.uint64: pa.uint64(),
    torch.float64: pa.float64(),
}


def value_of(address: int, nbytes: int, dtype: torch.dtype, owner: Any) -> pa.Array:
    """One leaf's `nbytes` (> 0) at `address` as a message value of the types above, not copied (the
    array keeps `owner` alive): a type is taken where the length and the address are multiples of its width."""
    data = pa.foreign_buffer(address, nbytes, base=owner)
    unit = _ARROW_TYPE.get(dtype)
    if unit is not None:
        size = unit.bit_width >> 3
        if not (nbytes % size or address % size):
            return pa.Array.from_buffers(unit, nbytes // size, [None, data])
    for width, unit in _WIDEST_FIRST:
        if not (nbytes % width or address % width):
            return pa.Array.from_buffers(unit, nbytes // width, [None, data])
    raise AssertionError("unreachable: one byte tiles anything")


def _versioned_capsules_work() -> bool:
    """Whether pyarrow hands out DLPack 1.0 capsules and torch reads them (pyarrow before 17 has
    no ``max_version``; found out once, with one byte)."""
    try:
        return torch.from_dlpack(pa.array([7], pa.uint8()).__dlpack__(max_version=(1, 0))).tolist() == [7]
    except (TypeError, RuntimeError, BufferError, ValueError):
        return False


DLPACK_VERSION = (1, 0)  # what `__dlpack__(max_version=...)` asks for where VERSIONED_CAPSULES
VERSIONED_CAPSULES = _versioned_capsules_work()
# torch's own reader of a DLPack capsule. ``torch.from_dlpack`` is a Python function in front of
# it that negotiates the protocol with the producer first, every call: a Python frame and a few
# calls more per message (about 8 us with the caches cold, as between messages). The capsule is
# asked for here instead, and handed to torch's reader directly where this torch has it.
FROM_CAPSULE: Any = getattr(torch._C, "_from_dlpack", None) or torch.from_dlpack


def view_of(value: pa.Array) -> torch.Tensor:
    """torch's zero-copy view of a host value (1-D, of the value's type), which keeps the value's
    buffer alive (most messages: received.Compiled.view's, codec.decode passing it in)."""
    if VERSIONED_CAPSULES:
        return FROM_CAPSULE(value.__dlpack__(max_version=DLPACK_VERSION))
    return FROM_CAPSULE(value.__dlpack__())
