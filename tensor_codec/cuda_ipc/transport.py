"""CUDA IPC transport: its steps and the order of a receiver's checks are docs/wire-format.md 5a's
and docs/cuda-ipc-design.md's ("The protocol"); the device work is backend.py's (`use_backend`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import torch

from .. import gpus, limits
from ..errors import DecodeError, UsageError
from ..layout import Destination, write_leaf
from ..plan import Plan
from ..transports.arrow_values import leaf_views
from ..transports.base import Materialized, Outgoing, Output
from ..transports.names import CUDA_IPC
from ..wire.buffer import CUDA_IPC_ALIGNMENT as ALIGNMENT
from ..wire.buffer import check_canonical_offsets, layout_offsets
from ..wire.cuda_ipc import (
    IpcFields,
    ProducerIdentity,
    check_empty_value,
    ipc_metadata,
    parse_ipc_fields,
    parse_producer,
)
from ..wire.header import ReceivedLeaf, header_metadata, leaf_table
from .identity import check_same_machine, host_identity, pid_namespace
from .pool import BufferPool
from .producing import ProducerBook
from .receiving import Receiver

__all__ = ["CudaIpcTransport", "ALIGNMENT", "use_backend", "configure", "stats", "trim", "flush"]

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
    pause = 0.0005
    while True:
        state.producer.collect()
        if not state.producer.in_flight():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


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
        if not state.producer.admit(output.name, total):
            return None
        buffer = state.pool.take(total, index)
        try:
            stream = state.backend.current_stream(index)
            if buffer.stream is not None and buffer.stream != stream:
                state.backend.wait(buffer.event, index)  # the writes below follow its last message's
            memory = buffer.tensor
            dest = Destination(memory.data_ptr(), lambda: memory, host=False)
            end = 0
            for leaf, start in zip(plan.leaves, offsets):
                if start > end:
                    memory[end:start].zero_()  # padding: deterministic, no stale bytes
                write_leaf(leaf, dest, start)
                end = start + leaf.nbytes
            state.backend.record(buffer.event, stream)
            buffer.stream = stream
            ref = state.producer.publish(output.name, output.receivers(), total, buffer, output.receivers_per_process())
        except BaseException:
            # Nothing was published: no receiver can know it. Writes may be queued on this
            # stream: the event follows them, so the buffer's next use orders after them.
            try:
                stream = state.backend.current_stream(index)
                state.backend.record(buffer.event, stream)
                buffer.stream = stream
            except Exception:
                pass  # the device is failing: the pool's next use of the buffer will say so
            state.pool.give_back(buffer)
            raise
        fields = IpcFields(buffer.handle, buffer.offset, total, buffer.event_handle, ref.slot, ref.generation)
        metadata = dict(codec_metadata)
        metadata.update(ipc_metadata(fields))
        return Outgoing(plan, metadata, 0, offsets, self, ref, in_value=False)

    def write(self, outgoing: Outgoing, dest: Destination) -> None:
        pass  # the Arrow value is empty: the bytes were written on the GPU by lay_out

    def abandon(self, outgoing: Outgoing) -> None:
        if outgoing.token is not None:
            _get_state().producer.abandon(outgoing.token)

    # ---------------------------------------------------------------- receiving
    def prepare(self, header: dict, leaves: list[ReceivedLeaf]) -> tuple[list[int], int, Any]:
        offsets, total = check_canonical_offsets(leaves, ALIGNMENT)
        if "producer" not in header:
            raise DecodeError("tc.header.producer: expected the producer's identity, missing")
        return offsets, total, parse_producer(header["producer"])

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
        offsets, total, producer = prepared
        check_empty_value(value)
        fields = _message_fields(metadata, total, producer)
        state = _get_state()
        base, memory, index = state.receiver.open(
            producer, fields, lambda: gpus.current().index_of(producer.gpu, "tc.header.producer.gpu", _ANOTHER_GPU)
        )
        if device is not None and (device.type != "cuda" or device.index != index):
            base, memory = base.to(device, copy=True), None  # copied out; the message is released below
        elif copy:
            base, memory = base.clone(), None
        borrowed = base if memory is not None else None
        del memory  # only the views keep the message now
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
        _, total, producer = compiled.prepared
        fields = _message_fields(metadata, total, producer)
        _get_state().receiver.pass_unread(producer, fields)


def _message_fields(metadata: dict, total: int, producer: ProducerIdentity) -> IpcFields:
    """A received message's `tc.ipc.*` fields, once they and its producer's identity pass every
    check that needs no CUDA: sizes and encodings, the same machine, the producer's own ledger."""
    fields = parse_ipc_fields(metadata, total)
    check_same_machine(producer)
    if not producer.ledger.startswith(f"tc-{producer.pid}-"):
        raise DecodeError(
            f"tc.header.producer.ledger: expected the ledger of process {producer.pid}, got {producer.ledger!r:.80}"
        )
    return fields
