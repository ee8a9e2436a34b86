"""Host transport: every leaf's bytes in the Arrow value, one flat buffer laid out as
docs/wire-format.md, section 5 says (wire/buffer.py checks it), its ``gpu`` header key included.
Writing puts each tensor straight into the destination it is given (an Arrow buffer, or dora's
send buffer: layout.write_leaf); receiving views the value through DLPack, or copies it once
where it must.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pyarrow as pa
import torch

from .. import gpus, limits
from ..errors import DecodeError
from ..layout import Destination, LeafLayout, write_leaf
from ..plan import Plan
from ..wire.buffer import HOST_ALIGNMENT as ALIGNMENT
from ..wire.buffer import KEY_GPU, Padding, check_canonical_offsets, check_value, layout_offsets
from ..wire.header import ReceivedLeaf, header_metadata, leaf_table
from . import arrow_values
from .base import Materialized, Outgoing, Output
from .names import HOST

_UINT8 = pa.uint8()
# dora's own threshold for shared memory: smaller messages arrive inline, at unaligned addresses,
# and receivers copy them (one copy of < 4 KiB costs less than the bookkeeping a borrowed view needs).
SMALL_MESSAGE_BYTES = 4096


class HostTransport:
    name = HOST
    leaf_keys = frozenset({"offset"})
    header_keys = frozenset({KEY_GPU})

    def lay_out(self, plan: Plan, output: Output) -> Outgoing:
        """The codec's metadata, leaf offsets and total bytes, memoized with a cached plan. The leaf
        table's text, offsets and total depend on the layout alone: kept in the layout's memo for
        the plans of other trees (a new canvas size every frame)."""
        memo = plan.memo
        key = HOST if output.onto_gpu is None else (HOST, output.onto_gpu)
        if memo is not None:
            entry = memo.get(key)
            if entry is not None:
                return Outgoing(plan, entry[0], entry[2], entry[1], self)
        layout_memo = plan.layout_memo
        table = None if layout_memo is None else layout_memo.get(HOST)
        if table is None:
            offsets, total = layout_offsets([leaf.nbytes for leaf in plan.leaves], ALIGNMENT)
            table = (leaf_table(plan.leaves, [{"offset": o} for o in offsets]), offsets, total)
            if layout_memo is not None:
                layout_memo[HOST] = table
        text, offsets, total = table
        extra = None if output.onto_gpu is None else {KEY_GPU: output.onto_gpu}
        metadata = header_metadata(plan.tree, text, HOST, limits.current(), extra)
        if memo is not None:
            memo[key] = (metadata, offsets, total)
        return Outgoing(plan, metadata, total, offsets, self)

    def write(self, outgoing: Outgoing, dest: Destination) -> None:
        leaves = outgoing.plan.leaves
        write = _write_any_leaf if outgoing.plan.has_cuda else write_leaf
        if len(leaves) == 1:  # most messages: one leaf at offset 0, no padding
            write(leaves[0], dest, 0)
            return
        end = 0
        for leaf, start in zip(outgoing.plan.leaves, outgoing.offsets):
            if start > end:
                # Padding is zero: deterministic bytes, and no stale memory leaks to receivers.
                ctypes.memset(dest.address + end, 0, start - end)
            write(leaf, dest, start)
            end = start + leaf.nbytes

    def value_in_place(self, outgoing: Outgoing) -> pa.Array | None:
        """The value as an Arrow array over the source tensor's own memory, not copied (the array keeps
        the tensor alive), when it is one dense host tensor's span (most messages); else None."""
        src = _dense_host_source(outgoing)
        if src is None:
            return None
        return arrow_values.value_of(src.data_ptr(), outgoing.nbytes, src.dtype, src)

    def small_copy(self, outgoing: Outgoing) -> pa.Array | None:
        """A copy of a small message (under SMALL_MESSAGE_BYTES) that is one dense host tensor's
        span: its bytes copied by one call into a bytes object, under a UInt8 array (tc.encode's
        value), with no buffer to allocate and no destination to set up (about 1 us of the 15 a
        small message costs, bench/small_message.py). The bytes are not 64-byte aligned and need
        not be: receivers copy small messages (`materialize`). None for any other message."""
        nbytes = outgoing.nbytes
        src = _dense_host_source(outgoing) if 0 < nbytes < SMALL_MESSAGE_BYTES else None
        if src is None:
            return None
        return pa.Array.from_buffers(_UINT8, nbytes, [None, pa.py_buffer(ctypes.string_at(src.data_ptr(), nbytes))])

    def remember(self, obj: Any, requested: str, checked_under: Any, outgoing: Outgoing, output: Output) -> None:
        pass  # a stream of host tensors is prepared by the dora Output, which sends its bytes itself

    def lay_out_prepared(self, obj: Any, requested: str, checked_under: Any, output: Output) -> None:
        return None

    def abandon(self, outgoing: Outgoing) -> None:
        pass  # nothing is held outside the value's bytes

    def in_place_layout(self, prepared: tuple) -> tuple[int, torch.dtype, tuple, tuple] | None:
        """Made once by `prepare`."""
        return prepared[5]

    def prepare(self, header: dict, leaves: list[ReceivedLeaf]) -> tuple:
        """-> (offsets, total length, where the padding lies, the leaf of a one-leaf message that
        can be restored as one tensor with its own strides, the UUID of the GPU to restore onto
        or None, `in_place_layout`'s layout or None), after checking every offset is the canonical
        one. (Zero-copy leaves are never autograd views of another tensor: a released leaf must
        not keep the message's buffer alive through a view's base.)"""
        offsets, total = check_canonical_offsets(leaves, ALIGNMENT)
        only = leaves[0] if len(leaves) == 1 else None
        # Not for bool bytes (checked for 0/1 below) or the experimental complex32, nor empty.
        if only is not None and (only.nbytes == 0 or only.dtype.is_bool or only.dtype.name == "complex32"):
            only = None
        gpu = header.get(KEY_GPU)
        if KEY_GPU in header:  # present, then a UUID: ``null`` is no GPU name either
            from ..wire.cuda_ipc import check_gpu_uuid  # no CUDA: a string check

            check_gpu_uuid(gpu, f"tc.header.{KEY_GPU}")
        in_place = None
        if only is not None and gpu is None and total >= SMALL_MESSAGE_BYTES:
            assert only.dtype.torch_dtype is not None  # wire.dtypes.by_name refuses a dtype this torch lacks
            in_place = (total, only.dtype.torch_dtype, only.shape, only.strides)
        return offsets, total, Padding(leaves, offsets), only, gpu, in_place

    def materialize(
        self,
        value: Any,
        metadata: dict,
        prepared: tuple,
        leaves: list[ReceivedLeaf],
        *,
        copy: bool,
        device: torch.device | None = None,
    ) -> Materialized:
        # One tensor viewed where it lies is received.Compiled.view's (most messages): what comes here is
        # copied, padded, of several leaves, restored onto a device, or named wrong.
        offsets, total, padding, single, gpu, _ = prepared
        width = check_value(value, total)
        if gpu is not None and device is None:
            device = gpus.device_of_gpu(gpu, f"tc.header.{KEY_GPU}")  # torch's GPUs, or the tests' stand-in's
        if device is not None and device.type != "cpu":
            copy = False  # the host bytes are only read once, by the copy onto the device
        owned = copy or total < SMALL_MESSAGE_BYTES
        if padding.gaps or (owned and total):
            # The buffer's address only where it is read here: a zero-copy view of a message
            # without gaps goes through DLPack alone (every step costs on a message's path).
            buffer = value.buffers()[1]
            if padding.gaps:
                padding.check(buffer, value.offset * width)
            address = buffer.address + value.offset * width
        if owned:
            # Owned, 64-byte aligned memory, one memmove (every small message: SMALL_MESSAGE_BYTES).
            if single is not None and device is None:
                # One leaf (most messages): the tensor itself is the memory, no view to set up.
                t = torch.empty_strided(single.shape, single.strides, dtype=single.dtype.torch_dtype)
                ctypes.memmove(t.data_ptr(), address, total)
                return Materialized([t], None, offsets)
            base = torch.empty(total, dtype=torch.uint8)
            if total:
                ctypes.memmove(base.data_ptr(), address, total)
            borrowed = None
        else:
            base = arrow_values.view_of(value)  # its storage keeps the Arrow buffer alive
            if width != 1:
                base = base.view(torch.uint8)  # the same bytes (other types: wire.buffer.UNITS)
            if base.data_ptr() % ALIGNMENT:
                base = base.clone()  # torch's allocator aligns to 64 bytes
                borrowed = None
            else:
                borrowed = base
        for i, (leaf, start) in enumerate(zip(leaves, offsets)):
            if leaf.dtype.is_bool and leaf.nbytes and bool((base[start : start + leaf.nbytes] > 1).any()):
                # Any byte other than 0/1 in a bool tensor is undefined behaviour in torch.
                raise DecodeError(f"tc.header.leaves[{i}]: expected bool bytes 0 or 1, got other values")
        if device is not None and device.type != "cpu":
            # One host-to-device copy of the whole message, then the same views on the device:
            # exact strides (broadcast dims included) survive, and nothing borrows dora's memory.
            on_device = torch.empty(total, dtype=torch.uint8, device=device)
            if total:
                on_device.copy_(base)  # one plain copy (bench/host_staging.py: staging did not pay)
            base, borrowed = on_device, None
        return Materialized(arrow_values.leaf_views(base, leaves, offsets), borrowed, offsets)


def _dense_host_source(outgoing: Outgoing) -> torch.Tensor | None:
    """The host tensor whose dense span, from its data_ptr() up (strides are never negative), is
    the whole value (one leaf at offset 0, no padding), or None: the value must be compacted,
    padded or brought off a GPU (`write`)."""
    leaves = outgoing.plan.leaves
    if len(leaves) != 1:
        return None
    leaf = leaves[0]
    src = leaf.source
    return src if leaf.raw_span and src is not None and src.is_cpu else None


def _write_any_leaf(leaf: LeafLayout, dest: Destination, start: int) -> None:
    """`write_leaf` for a message that holds a GPU leaf (the way back is `materialize`'s device): one
    plain copy off the GPU (not staged: docs/transports.md, "Across machines", says why), a non-dense
    leaf compacted on the GPU first, where it is cheap."""
    src = leaf.source
    if src is None or not src.is_cuda or leaf.raw_span:
        write_leaf(leaf, dest, start)  # a dense GPU leaf: one plain copy of its span
        return
    dense = torch.empty(leaf.nbytes, dtype=torch.uint8, device=src.device)
    dense.view(src.dtype).as_strided(src.shape, leaf.strides).copy_(src)
    dest.tensor()[start : start + leaf.nbytes].copy_(dense)
