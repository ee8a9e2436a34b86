"""CUDA IPC transport: its steps and the order of a receiver's checks are docs/wire-format.md 5a's
and docs/cuda-ipc-design.md's ("The protocol"); the device work is backend.py's (`use_backend`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from .. import gpus, limits
from ..errors import DecodeError, UsageError
from ..layout import Destination, holds_dense_span, leaf_view, write_leaf
from ..plan import Plan
from ..transports.arrow_values import leaf_views
from ..transports.base import Materialized, Outgoing, Output
from ..transports.names import CUDA_IPC
from ..walk import plain_of
from ..wire.buffer import CUDA_IPC_ALIGNMENT as ALIGNMENT
from ..wire.buffer import check_canonical_offsets, layout_offsets
from ..wire.cuda_ipc import (
    MESSAGE_KEYS,
    ProducerIdentity,
    buffer_metadata,
    check_empty_value,
    message_metadata,
    parse_ipc_fields,
    parse_producer,
)
from ..wire.dtypes import by_torch
from ..wire.header import ReceivedLeaf, header_metadata, leaf_table
from ..wire.structure import is_bare_tensor
from .identity import check_same_machine, host_identity, pid_namespace
from .ledger import SlotRef
from .pool import BufferPool, MessageBuffer
from .producing import ProducerBook
from .receiving import Receiver

__all__ = ["CudaIpcTransport", "ALIGNMENT", "use_backend", "configure", "stats", "trim", "flush"]

# tc.ipc_flush looks again after this long, doubling while nothing is released, up to the most
# (a release is a write into shared memory: nothing can wake the producer for it).
FLUSH_FIRST_PAUSE_S = 0.00005
FLUSH_MAX_PAUSE_S = 0.005
PREPARED_MAX = 64  # signatures an output keeps (a stream has one, or a few in turn), and views a buffer keeps
# A TVTensor's attributes read as a plain tensor's, without its __torch_function__.
_TORCH_FUNCTION_OFF = torch._C.DisableTorchFunctionSubclass


@dataclass(frozen=True, slots=True)
class PreparedSend:
    """What the first CUDA IPC message of a signature fixed for the next ones (`remember`)."""

    state: Any  # the process's CUDA IPC state it was sent under (its ledger, pool)
    checked_under: Any  # the codec's limits generation and what routing read of the environment
    metadata: dict  # the codec's keys (the header, the producer's identity)
    nbytes: int
    index: int  # its GPU
    view: tuple  # (torch dtype, shape, strides) it is copied into at the buffer's start
    element_size: int
    complex: bool  # the lazy conjugate bit exists only on complex tensors
    receivers: tuple[int, int]  # inputs wired to the output, the most of them in one process


# What to do instead when a message is on a GPU this process cannot see (`Gpus.index_of`'s error).
_ANOTHER_GPU = (
    "send with transport='host' to reach another GPU (the receiver restores host bytes onto the GPU it "
    "asks for with device=...)"
)


class _State:
    """One per process: the device backend, the producer's buffers and bookkeeping, the receiver's."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.pool = BufferPool(backend)
        self.producer = ProducerBook(recycle=self.pool.give_back)
        self.receiver = Receiver(backend)


_state: _State | None = None
_state_lock = threading.Lock()


def _get_state() -> _State:
    global _state
    if _state is None:
        with _state_lock:
            if _state is None:
                from .backend import CudaBackend

                _state = _State(CudaBackend())
    return _state


def use_backend(backend: Any) -> None:
    """Replace the device backend (tests: a CPU stand-in); None restores the CUDA one lazily. The
    stand-in's GPUs replace torch's too (gpus.py): its "GPU" memory is CPU memory."""
    global _state
    with _state_lock:
        _state = None if backend is None else _State(backend)
        gpus.use(backend)


def configure(output_id: str, **settings: Any) -> None:
    """tc.ipc_configure's work (`ProducerBook.configure`)."""
    _get_state().producer.configure(output_id, **settings)


def stats() -> dict:
    """tc.ipc_stats's work."""
    state = _get_state()
    state.producer.collect()
    state.receiver.poll()
    return {"outputs": state.producer.stats(), "pool": state.pool.stats(), "receiver": state.receiver.stats()}


def trim() -> int:
    """Retire every idle message buffer (pool.py); -> how many."""
    state = _state
    if state is None:
        return 0
    state.producer.collect()
    return state.pool.trim()


def flush(timeout_s: float = 10.0) -> bool:
    """tc.ipc_flush's work: -> False if messages were still in flight after `timeout_s`."""
    if type(timeout_s) not in (int, float) or not timeout_s >= 0:
        raise UsageError(f"timeout_s: expected >= 0 seconds, got {timeout_s!r:.80}")
    state = _state
    if state is None or not state.producer.has_ledger:
        return True
    deadline = time.monotonic() + timeout_s
    pause = FLUSH_FIRST_PAUSE_S
    while True:
        state.receiver.poll()  # what this process received itself and is done with goes back first
        if state.producer.collect():
            pause = FLUSH_FIRST_PAUSE_S  # receivers are releasing: the rest likely follows soon
        if not state.producer.in_flight():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, FLUSH_MAX_PAUSE_S)


class CudaIpcTransport:
    name = CUDA_IPC
    leaf_keys = frozenset({"offset"})
    header_keys = frozenset({"producer"})

    # ---------------------------------------------------------------- sending
    def _codec_metadata(self, state: _State, plan: Plan, index: int) -> tuple[dict, list[int], int]:
        key = (self.name, index, state.producer.ledger.name)
        memo = plan.memo
        if memo is not None and key in memo:
            return memo[key]
        uuid = gpus.current().uuid(index)
        offsets, total = layout_offsets([leaf.nbytes for leaf in plan.leaves], ALIGNMENT)
        producer = ProducerIdentity(host_identity(), pid_namespace(), os.getpid(), uuid, state.producer.ledger.name)
        leaf_fields = [{"offset": o} for o in offsets]
        entry = (
            header_metadata(
                plan.tree,
                leaf_table(plan.leaves, leaf_fields),
                self.name,
                limits.current(),
                {"producer": producer.header()},
            ),
            offsets,
            total,
        )
        if memo is not None:
            memo[key] = entry
        return entry

    def lay_out(self, plan: Plan, output: Output) -> Outgoing | None:
        """Copy the message into a pooled message buffer on its GPU, record the buffer's event and
        publish it in a ledger slot; the Arrow value stays empty. None when the output's policy
        dropped it. In steady state nothing is allocated, exported or created here."""
        state = _get_state()
        index = gpus.current().device_of(plan)
        codec_metadata, offsets, total = self._codec_metadata(state, plan, index)

        def write(buffer: MessageBuffer) -> None:
            memory = buffer.tensor
            dest = Destination(memory.data_ptr(), lambda: memory, host=False)
            end = 0
            for leaf, start in zip(plan.leaves, offsets):
                if start > end:
                    memory[end:start].zero_()  # padding: deterministic, no stale bytes
                write_leaf(leaf, dest, start)
                end = start + leaf.nbytes

        receivers = (output.receivers(), output.receivers_per_process())
        published = _publish(state, output.name, receivers, total, index, write)
        if published is None:
            return None
        buffer, ref = published
        metadata = message_metadata(codec_metadata, _buffer_keys(buffer), total, ref.slot, ref.generation)
        return Outgoing(plan, metadata, 0, offsets, self, ref, in_value=False)

    def remember(self, obj: Any, requested: str, checked_under: Any, outgoing: Outgoing, output: Output) -> None:
        """Keep what a sent message of one tensor fixed for its signature's next ones
        (`lay_out_prepared`): a bare tensor (no attributes) whose bytes are one dense span."""
        plan = outgoing.plan
        if len(plan.leaves) != 1 or not is_bare_tensor(plan.tree):
            return
        leaf, t = plan.leaves[0], plain_of(obj)
        if not leaf.raw_span or leaf.broadcast or t.requires_grad or t.is_neg() or t.is_conj():
            return
        if len(output.prepared) >= PREPARED_MAX:
            output.prepared.clear()  # a stream has one signature, or a few in turn
        output.prepared_by = self
        output.prepared[_signature(type(obj), t, requested)] = PreparedSend(
            _get_state(),
            checked_under,
            {k: v for k, v in outgoing.metadata.items() if k not in MESSAGE_KEYS},
            outgoing.offsets[-1] + leaf.nbytes,
            gpus.current().device_of(plan),
            (t.dtype, leaf.shape, leaf.strides),
            t.element_size(),
            t.is_complex(),
            (output.receivers(), output.receivers_per_process()),
        )

    def lay_out_prepared(
        self, obj: Any, requested: str, checked_under: Any, output: Output
    ) -> Outgoing | Literal[False] | None:
        """A message of a signature `remember`ed: copied into a pooled buffer, published and its
        metadata filled in, with no plan, layout or header built (docs/cuda-ipc-design.md, "A
        stream's prepared sends and receives"). -> its Outgoing; False where the output's policy dropped it;
        None where it is not one (the full path takes it)."""
        off = None if type(obj) is torch.Tensor else _TORCH_FUNCTION_OFF()
        if off is not None:
            off.__enter__()
        try:
            t = obj
            try:
                prepared = output.prepared.get(_signature(type(obj), t, requested))
            except RuntimeError:  # a tensor without strides (sparse, nested)
                return None
            if (
                prepared is None
                or prepared.state is not _state
                or prepared.checked_under != checked_under
                or t.requires_grad
                or t.is_neg()
                or (prepared.complex and t.is_conj())
                or not holds_dense_span(t, prepared.nbytes, prepared.element_size)
            ):
                return None
            state = _get_state()  # the one it was prepared under (checked above)
            view = prepared.view

            def write(buffer: MessageBuffer) -> None:
                _buffer_view(buffer, view).copy_(t)  # one dense span, as laid out: a plain copy

            published = _publish(state, output.name, prepared.receivers, prepared.nbytes, prepared.index, write)
        finally:
            if off is not None:
                off.__exit__(None, None, None)
        if published is None:
            return False
        buffer, ref = published
        metadata = message_metadata(prepared.metadata, _buffer_keys(buffer), prepared.nbytes, ref.slot, ref.generation)
        # One leaf, at its buffer's start; no plan was made (nothing reads one of a sent CUDA IPC message).
        return Outgoing(None, metadata, 0, [0], self, ref, in_value=False)  # type: ignore[arg-type]

    def write(self, outgoing: Outgoing, dest: Destination) -> None:
        pass  # the Arrow value is empty: the bytes were written on the GPU by lay_out

    def abandon(self, outgoing: Outgoing) -> None:
        if outgoing.token is not None:
            _get_state().producer.abandon(outgoing.token)

    # ---------------------------------------------------------------- receiving
    def prepare(self, header: dict, leaves: list[ReceivedLeaf]) -> tuple[list[int], int, Any, tuple | None]:
        """-> (offsets, total, the producer, the one leaf's (dtype, shape, strides) where a message
        is one tensor that a dtype view of its buffer, set to its shape, gives: else None)."""
        offsets, total = check_canonical_offsets(leaves, ALIGNMENT)
        if "producer" not in header:
            raise DecodeError("tc.header.producer: expected the producer's identity, missing")
        one = None
        if len(leaves) == 1 and leaves[0].dtype.name != "complex32":  # (torch warns viewing complex32)
            one = (leaves[0].dtype.torch_dtype, leaves[0].shape, leaves[0].strides)
        return offsets, total, parse_producer(header["producer"]), one

    def in_place_layout(self, prepared: tuple) -> None:
        """No host view: every message opens (or finds) its producer's pool and waits on its event."""
        return None

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
        offsets, total, producer, one = prepared
        check_empty_value(value)
        state = _get_state()
        base, memory, index = state.receiver.open(
            producer,
            metadata,
            total,
            _check_producer,
            lambda: gpus.current().index_of(producer.gpu, "tc.header.producer.gpu", _ANOTHER_GPU),
        )
        if device is not None and (device.type != "cuda" or device.index != index):
            base, memory = base.to(device, copy=True), None  # copied out; the message is released below
        elif copy:
            base, memory = base.clone(), None
        borrowed = base if memory is not None else None
        del memory  # only the views keep the message now
        if one is not None:
            # A dtype view is no autograd view (no `_base`): a released leaf keeps nothing alive.
            try:
                return Materialized([base.view(one[0]).as_strided_(one[1], one[2])], borrowed, offsets)
            except RuntimeError:  # a view torch will not make: leaf_views names it
                pass
        return Materialized(leaf_views(base, leaves, offsets), borrowed, offsets)

    def pass_unread(self, metadata: dict) -> None:
        """`Receiver.pass_unread` for a message validated as `materialize` validates it; DecodeError
        for a malformed message or a slot that cannot be claimed."""
        from .. import received
        from ..transports import transport_for_message
        from ..wire.header import TRANSPORT_FIELD, read_metadata

        compiled = received.compile_header(read_metadata(metadata), transport_for_message)
        if compiled.transport.name != self.name:
            raise DecodeError(f"{TRANSPORT_FIELD}: expected {self.name!r}, got {compiled.transport.name!r:.80}")
        _, total, producer, _ = compiled.prepared
        fields = parse_ipc_fields(metadata, total)
        _check_producer(producer)
        _get_state().receiver.pass_unread(producer, fields)


def _signature(cls: type, t: torch.Tensor, requested: str) -> tuple:
    """What a prepared send is kept by: the object's class, the tensor's dtype, shape, strides
    and device (read with subclasses' __torch_function__ off), and the transport asked for."""
    return (cls, t.dtype, t.shape, t.stride(), t.is_cuda, t.get_device(), requested)


def _check_producer(producer: ProducerIdentity) -> None:
    """A producer whose messages this process may open: a process of this machine, with its own
    ledger (the checks that need neither the message's fields nor CUDA)."""
    check_same_machine(producer)
    if not producer.ledger.startswith(f"tc-{producer.pid}-"):
        raise DecodeError(
            f"tc.header.producer.ledger: expected the ledger of process {producer.pid}, got {producer.ledger!r:.80}"
        )


def _publish(
    state: _State,
    output: str,
    receivers: tuple[int, int],
    total: int,
    index: int,
    write: Callable[[MessageBuffer], None],
) -> tuple[MessageBuffer, SlotRef] | None:
    """Admit `total` bytes on `output`, take a pooled buffer on GPU `index`, `write` the message
    into it, record its event and publish it in a ledger slot for `receivers` (inputs wired, the
    most in one process); None when the output's policy dropped it. Collects finished messages
    only when it needs room: past the cap, or with no idle buffer of the size (in batches:
    `ProducerBook.collect_first`)."""
    if not state.producer.admit(output, total):
        return None
    buffer = state.pool.take_idle(total, index)
    if buffer is None and state.producer.collect_first(total):
        state.producer.collect()
        buffer = state.pool.take_idle(total, index)
    if buffer is None:
        buffer = state.pool.take(total, index)
    backend = state.backend
    try:
        stream = backend.current_stream(index)
        if buffer.stream is not None and buffer.stream != stream:
            backend.wait(buffer.event, index)  # the writes below follow its last message's
        write(buffer)
        backend.record(buffer.event, stream)
        buffer.stream = stream
        ref = state.producer.publish(output, receivers[0], total, buffer, receivers[1])
    except BaseException:
        # Nothing was published: no receiver can know it. Writes may be queued on this
        # stream: the event follows them, so the buffer's next use orders after them.
        try:
            stream = backend.current_stream(index)
            backend.record(buffer.event, stream)
            buffer.stream = stream
        except Exception:
            pass  # the device is failing: the pool's next use of the buffer will say so
        state.pool.give_back(buffer)
        raise
    return buffer, ref


def _buffer_keys(buffer: MessageBuffer) -> dict:
    """The metadata keys of every message in `buffer` (`buffer_metadata`), made at its first."""
    keys = buffer.metadata
    if keys is None:
        keys = buffer.metadata = buffer_metadata(buffer.handle, buffer.offset, buffer.event_handle)
    return keys


def _buffer_view(buffer: MessageBuffer, view: tuple) -> torch.Tensor:
    """`buffer`'s memory as the tensor a prepared signature copies into: its dtype, shape and
    strides (`view`) from the buffer's start, made once per buffer and signature."""
    tensor = buffer.views.get(view)
    if tensor is None:
        if len(buffer.views) >= PREPARED_MAX:
            buffer.views.clear()
        memory = buffer.tensor
        dtype, shape, strides = view
        dtype = by_torch(dtype, ())
        storage, start = memory.untyped_storage(), memory.storage_offset()
        tensor = buffer.views[view] = leaf_view(storage, dtype, start, shape, strides)
    return tensor
