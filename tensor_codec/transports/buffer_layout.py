"""The message buffer's layout, shared by every transport: leaves one after another in depth-first
order, each at the previous leaf's end aligned up (leaf 0 at 0), zero padding between them, the
buffer ending at the last leaf's end. Only the alignment differs per transport (host 64, CUDA IPC
256). The layout is canonical, so a receiver checks every offset by recomputing it."""

from __future__ import annotations

import torch

from ..errors import DecodeError
from ..layout import leaf_view
from ..wire import ReceivedLeaf

__all__ = ["layout_offsets", "check_canonical_offsets", "leaf_views"]


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
