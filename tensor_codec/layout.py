"""How one tensor is laid on the wire and read back: the writer's half of the layout rule of
docs/wire-format.md, section 6 (wire/leaf.py holds the receiver's check), and the copies.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .errors import EncodeError, format_path
from .wire.dtypes import WireDType, by_torch
from .wire.leaf import MAX_RANK, contiguous_strides, dense_span

__all__ = [
    "LeafLayout",
    "values_of",
    "plan_leaf",
    "write_leaf",
    "Destination",
    "leaf_view",
    "clone_exact",
]


@dataclass(slots=True)
class LeafLayout:
    """What the wire says about one tensor's bytes, plus (sender side) how to copy them."""

    dtype: WireDType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements, as torch counts them
    nbytes: int
    # Sender side only: the tensor to copy from and whether a raw byte copy of its span suffices.
    source: torch.Tensor | None = None
    raw_span: bool = False
    broadcast: tuple[int, ...] = ()  # dims narrowed to size 1 in `source`

    def with_plain_source(self, t: torch.Tensor) -> LeafLayout:
        """This layout for another tensor of the same dtype, shape and strides that needs nothing
        resolved (no autograd, no lazy conj / neg bits: `values_of` first otherwise): only its
        storage is checked, in fewer calls where the layout is dense (every step runs per message)."""
        if not (self.raw_span and holds_dense_span(t, self.nbytes, self.dtype.itemsize)):
            _check_storage(t, ())  # the general check, which names a storage too small
        for d in self.broadcast:
            t = t.narrow(d, 0, 1)
        return LeafLayout(self.dtype, self.shape, self.strides, self.nbytes, t, self.raw_span, self.broadcast)


def values_of(t: torch.Tensor, path: tuple) -> torch.Tensor:
    """`t` checked and ready to copy: its storage holds what it addresses, no autograd, and the
    lazy conj / neg bits materialized (storage holds the values before those bits apply)."""
    _check_storage(t, path)
    if t.requires_grad:
        t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t


def holds_dense_span(t: torch.Tensor, nbytes: int, element_size: int) -> bool:
    """Whether the storage of `t`, a dense layout whose span is `nbytes`, still holds it: the quick
    form of `_check_storage` for the per-message paths (a dense span starts at the tensor's
    offset; strides are never negative). `element_size`: its dtype's, which the caller knows."""
    return t.untyped_storage().nbytes() >= t.storage_offset() * element_size + nbytes


def _check_storage(t: torch.Tensor, path: tuple) -> None:
    """The tensor's storage must hold every element it addresses. A storage resized or freed
    after the view was made (``untyped_storage().resize_(0)``) would otherwise be read at a null
    or dangling address; torch itself crashes on such a tensor."""
    numel = t.numel()
    if numel == 0:
        return
    if t.is_contiguous():
        last = t.storage_offset() + numel - 1
    else:
        last = t.storage_offset() + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    needed = (last + 1) * t.element_size()
    held = t.untyped_storage().nbytes()
    if held < needed:
        raise EncodeError(
            f"unsupported tensor at `{format_path(path)}`: its storage holds {held} bytes, the view "
            f"needs {needed} (was the storage resized or freed after the view was made?)"
        )


def leaf_view(storage: torch.UntypedStorage, dtype: WireDType, byte_offset: int, shape, strides) -> torch.Tensor:
    """A tensor of `dtype` viewing `storage` from `byte_offset` (a multiple of the item size)."""
    # Viewing an empty uint8 tensor as complex32 avoids torch's "ComplexHalf is experimental" warning.
    device = storage.device
    torch_dtype = dtype.torch_dtype
    assert torch_dtype is not None  # wire.dtypes.by_name refuses a dtype this torch lacks
    if dtype.name == "complex32":
        t = torch.empty(0, dtype=torch.uint8, device=device).view(torch_dtype)
    else:
        t = torch.empty(0, dtype=torch_dtype, device=device)
    return t.set_(storage, byte_offset // dtype.itemsize, shape, strides)


def clone_exact(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` that owns its memory with exactly `t`'s shape and strides, where the layout
    is one the wire carries (dense in some dim order, broadcast dims kept at stride 0): only the
    bytes it addresses are copied, so ``arange(3).expand(2**20, 3)`` stays 12 bytes. Other layouts
    (gaps, overlap) are cloned dense, keeping the dim order (``preserve_format``)."""
    t = t.detach()
    span = dense_span(t.shape, t.stride()) if t.numel() else None
    if span is None:
        return t.clone(memory_format=torch.preserve_format)
    reduced = t
    for d, (size, stride) in enumerate(zip(t.shape, t.stride())):
        if size > 1 and stride == 0:
            reduced = reduced.narrow(d, 0, 1)
    block = torch.empty(span, dtype=t.dtype, device=t.device)
    block.as_strided(reduced.shape, reduced.stride()).copy_(reduced)  # each byte of the span once
    return block.as_strided(t.shape, t.stride())


def plan_leaf(t: torch.Tensor, path: tuple) -> LeafLayout:
    """Decide the wire layout of `t` (a plain tensor at `path`) without copying anything."""
    if t.layout is not torch.strided or t.is_quantized or t.is_nested or t.is_meta:
        what = "quantized" if t.is_quantized else "nested" if t.is_nested else "meta" if t.is_meta else str(t.layout)
        raise EncodeError(
            f"unsupported tensor at `{format_path(path)}`: expected a dense (torch.strided) tensor with data, got a "
            f"{what} tensor"
        )
    dtype = by_torch(t.dtype, path)
    if t.dim() > MAX_RANK:
        raise EncodeError(
            f"unsupported tensor at `{format_path(path)}`: expected at most {MAX_RANK} dims, got {t.dim()}"
        )
    t = values_of(t, path)
    shape = tuple(t.shape)
    strides = tuple(t.stride())
    if t.is_contiguous():  # the common case: dense row-major, nothing to work out (torch: any empty tensor)
        numel = t.numel()
        return LeafLayout(dtype, shape, strides, numel * dtype.itemsize, t, raw_span=numel > 0)

    broadcast = [d for d in range(len(shape)) if shape[d] > 1 and strides[d] == 0]
    reduced = t
    for d in broadcast:
        reduced = reduced.narrow(d, 0, 1)
    span = dense_span(shape, strides)
    if span is not None:
        return LeafLayout(dtype, shape, strides, span * dtype.itemsize, reduced, True, tuple(broadcast))

    # Compact: row-major over the reduced shape, broadcast dims keep stride 0.
    compact = list(contiguous_strides(reduced.shape))
    for d in broadcast:
        compact[d] = 0
    return LeafLayout(dtype, shape, tuple(compact), reduced.numel() * dtype.itemsize, reduced, False, tuple(broadcast))


# Dense host-to-host copies up to this size are one memmove (one thread, no dispatch); above it
# torch's copy, which spreads over threads where a machine has cores to spare. Measured on the
# 2-core machine, into fresh Arrow buffers as encode writes (2026-11-23, other work running):
# memmove 39 / 145 / 3220 us for 1 / 4 / 16 MB, torch's copy 102 / 1623 / 5211 us: its threads
# fault the fresh pages in and wait on each other. The earlier 256 KB threshold made 1 MB encodes
# take ~700 us instead of ~100 (issue 18: 1 MB end to end against the pa.array pattern).
_MEMMOVE_MAX = 16 << 20


@dataclass(slots=True, eq=False)
class Destination:
    """Bytes being written: their address, and a uint8 tensor over them made only when torch has
    to do a copy (making one costs microseconds, a small memmove less than one). `host=False`:
    device memory, written by torch only."""

    address: int
    make_tensor: Callable[[], torch.Tensor]
    host: bool = True
    _tensor: torch.Tensor | None = field(default=None, init=False)

    def tensor(self) -> torch.Tensor:
        tensor = self._tensor
        if tensor is None:
            tensor = self._tensor = self.make_tensor()
        return tensor

    def release(self) -> None:
        self._tensor = None


def write_leaf(leaf: LeafLayout, dest: Destination, start: int) -> None:
    """Copy `leaf.source` into `dest` at byte `start` (`leaf.nbytes` bytes). One pass: a dense
    source is one byte copy of its span, anything else one strided copy that compacts it. (A GPU
    leaf to compact into host bytes is compacted on the GPU first: transports/host.py.)"""
    if leaf.nbytes == 0:
        return
    src = leaf.source
    assert src is not None  # a sender's layout (plan_leaf) holds its tensor
    if leaf.raw_span and dest.host and leaf.nbytes <= _MEMMOVE_MAX and src.is_cpu:
        # Most leaves: one byte copy. Dense layouts address bytes from data_ptr() up (strides
        # are never negative).
        ctypes.memmove(dest.address + start, src.data_ptr(), leaf.nbytes)
        return
    if leaf.raw_span:
        src_bytes = torch.empty(0, dtype=torch.uint8, device=src.device).set_(
            src.untyped_storage(), src.storage_offset() * leaf.dtype.itemsize, (leaf.nbytes,), (1,)
        )
        dest.tensor()[start : start + leaf.nbytes].copy_(src_bytes)
        return
    # Compact: `src` has broadcast dims narrowed to size 1, so the wire strides (0 there) address
    # every byte of the destination exactly once. torch's strided copy compacts in a single pass.
    dst = dest.tensor()[start : start + leaf.nbytes]
    dst.view(src.dtype).as_strided(src.shape, leaf.strides).copy_(src)  # src.dtype: the leaf's own
