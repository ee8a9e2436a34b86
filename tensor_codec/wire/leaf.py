"""The layout rule of one leaf on the wire (docs/wire-format.md, section 6): which shapes,
strides and byte counts a writer may produce (broadcast dims sent once, the others dense in any
dim order: `dense_span`), and the receiver's check that accepts exactly those, so every
addressable element lies inside the leaf's bytes.
"""

from __future__ import annotations

from ..errors import DecodeError, Where
from .dtypes import WireDType

__all__ = ["MAX_RANK", "MAX_DIM", "contiguous_strides", "dense_span", "check_leaf_layout"]

MAX_RANK = 64  # dims per tensor accepted on the wire
MAX_DIM = 1 << 62  # upper bound for any size or stride value (fits int64 with room to multiply)


def contiguous_strides(shape: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    strides = [0] * len(shape)
    step = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = step
        step *= max(shape[i], 1)
    return tuple(strides)


def _is_row_major(shape, strides) -> bool:
    step = 1
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] != 1 and strides[i] != step:
            return False
        step *= shape[i]
    return True


def dense_span(shape, strides) -> int | None:
    """Elements spanned if the non-broadcast dims are dense in some order, else None."""
    dims = sorted((st, sz) for sz, st in zip(shape, strides) if sz > 1 and st != 0)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return None
        expected *= sz
    return expected


def check_leaf_layout(dtype: WireDType, shape, strides, nbytes, where: str | Where) -> None:
    """Receiver-side validation of one leaf's layout; raises DecodeError naming the field."""
    if len(strides) != len(shape):
        raise DecodeError(f"{where}.strides: expected {len(shape)} entries (one per dim of shape), got {len(strides)}")
    # The product of the non-zero sizes bounds every partial product torch forms (it multiplies
    # sizes left to right), so an empty tensor cannot smuggle in sizes that overflow int64.
    numel, nonzero = 1, 1
    for sz in shape:
        numel *= sz
        if sz:
            nonzero *= sz
    if nonzero * dtype.itemsize > MAX_DIM:
        raise DecodeError(
            f"{where}.shape: expected at most {MAX_DIM} logical bytes (product of the non-zero sizes "
            f"times the item size), got {nonzero * dtype.itemsize}"
        )
    if numel == 0:
        if nbytes != 0:
            raise DecodeError(f"{where}.nbytes: expected 0 for a tensor with no elements, got {nbytes}")
        return
    if nbytes == numel * dtype.itemsize and _is_row_major(shape, strides):
        return  # the common case, checked in one pass
    span = dense_span(shape, strides)
    if span is None:
        raise DecodeError(
            f"{where}.strides: expected a dense layout (each stride of a non-broadcast dim equal to the "
            f"product of the sizes of the dims with smaller strides), got shape {list(shape)} strides {list(strides)}"
        )
    if span * dtype.itemsize != nbytes:
        raise DecodeError(f"{where}.nbytes: expected {span * dtype.itemsize} ({span} x {dtype.name}), got {nbytes}")
