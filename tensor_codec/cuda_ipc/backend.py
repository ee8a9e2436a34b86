"""Every device operation of the CUDA IPC transport, through torch's own APIs (which GPU is which
aside: tensor_codec/gpus.py), so that a CPU stand-in drives the whole protocol without a GPU
(docs/cuda-ipc-design.md, "Status"; what they rest on: "Facts about torch 2.14", "Release without events").
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
from dataclasses import dataclass
from typing import Any

import torch

from ..wire.cuda_ipc import EVENT_HANDLE_BYTES

__all__ = ["CudaBackend", "MessageMemory", "Segment"]

log = logging.getLogger("tensor_codec")

_NO_COUNTER = b"/tc-no-torch-counter"  # receivers never touch torch's ref counter: see open_segment
_ZERO_EVENT = bytes(EVENT_HANDLE_BYTES)


@dataclass
class Segment:
    """An opened producer segment."""

    keepalive: Any  # keeps the mapping open (c10 closes it when the last storage of the segment dies)
    base: int  # the address torch's offsets count from in this process
    end: int | None  # the end of the mapped allocation, where the driver could tell


class MessageMemory:
    """One received message's bytes, as the object torch keeps a reference to for as long as any
    view of the message lives (each backend's subclass adds the array interface it serves).
    `on_gone`: (function, *arguments), called once, on the thread where the last view died, as
    this object dies: a slot and a `__del__` rather than a `weakref.finalize` (which registers
    every message in a global table and costs a dictionary round trip more per message)."""

    __slots__ = ("segment", "on_gone", "__weakref__")

    def __init__(self, segment: Any):
        self.segment = segment  # the mapping stays open while the message is in use
        self.on_gone: tuple | None = None

    def __del__(self) -> None:
        gone, self.on_gone = self.on_gone, None
        if gone is not None:
            try:
                gone[0](*gone[1:])
            except Exception as e:  # never raise out of a deleter
                if not sys.is_finalizing():  # (at interpreter exit the callee's module may be half gone)
                    log.warning("cuda-ipc: a received message's release failed: %s: %s", type(e).__name__, e)


class _MessageMemory(MessageMemory):
    """A message's bytes as a ``__cuda_array_interface__``."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, address: int, size: int, segment: Segment):
        super().__init__(segment)
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 2,
            "strides": None,
        }


class CudaBackend:
    """The transport's device operations, set-up and per message as the sections below say (the CPU
    stand-in counts each call: tests/ipc/test_ipc_steady_state.py holds the transport to them)."""

    # ---- where the work goes (which GPU is which is gpus.py's: the stand-in serves both)
    def current_stream(self, index: int) -> Any:
        return torch.cuda.current_stream(index)

    # ---- producer: set-up, once per pooled buffer
    def allocate(self, nbytes: int, index: int) -> torch.Tensor:
        """A message buffer, allocated on the current stream (the one that first writes it)."""
        return torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", index))

    def export(self, buffer: torch.Tensor) -> tuple[bytes, int]:
        """-> (torch's handle of the segment holding `buffer`, the byte offset of `buffer` in it)."""
        storage = buffer.untyped_storage()
        _device, handle, _size, offset, counter_handle, counter_offset, _event, _sync = storage._share_cuda_()
        # torch's share also takes a slot in its interprocess ref counter; give it back now: our
        # ledger decides when the memory may be reused, and a buffer the pool retires returns to
        # the caching allocator at once instead of waiting in torch's limbo for ipc_collect().
        torch.UntypedStorage._release_ipc_counter_cuda(counter_handle, counter_offset)
        return bytes(handle), int(offset) + int(buffer.storage_offset())

    def new_event(self, index: int) -> tuple[Any, bytes]:
        """An interprocess event on GPU `index` and its 64-byte handle (exported once)."""
        with torch.cuda.device(index):
            event = torch.cuda.Event(interprocess=True)
            return event, bytes(event.ipc_handle())  # ipc_handle() creates the event on this device

    def retire(self, buffer: torch.Tensor, event: Any) -> None:
        """The pool lets go of `buffer`, whose last write `event` follows (rare: past the pool's
        idle bound, or a trim). The caching allocator cannot order an exported block's reuse by
        stream (record_stream skips blocks whose deleter torch's share replaced), so the host
        waits for that write here; every receiver was done with the buffer already."""
        event.synchronize()  # returns at once for an event never recorded

    # ---- per message, both sides
    def record(self, event: Any, stream: Any) -> None:
        """Record `event` on `stream` (after the copies that wrote a message on it)."""
        event.record(stream)

    def wait(self, event: Any, index: int) -> None:
        """The current stream waits (on the GPU, no host sync) for `event`."""
        torch.cuda.current_stream(index).wait_event(event)

    # ---- receiver: set-up, once per producer segment, event and marker
    def open_segment(self, handle: bytes, index: int, offset: int, size: int) -> Segment:
        """Open a producer's segment (slow: the receiver caches the result)."""
        with torch.cuda.device(index):
            # The storage's deleter (when the cache lets go of it) syncs this process's current
            # stream and decrements a ref counter we do not use: a counter file that does not
            # exist is skipped by torch.
            storage = torch.UntypedStorage._new_shared_cuda(
                index, handle, size, offset, _NO_COUNTER, 0, _ZERO_EVENT, False
            )
            start = storage.data_ptr()
            found = _allocation_range(start)
        return Segment(storage, start - offset, None if found is None else found[0] + found[1])

    def open_event(self, handle: bytes, index: int) -> Any:
        """A producer's interprocess event, opened from its handle (the receiver caches it)."""
        return torch.cuda.Event.from_ipc_handle(index, handle)

    def new_marker(self, index: int) -> Any:
        """A plain event (no timing) whose ``query()`` tells when this process's GPU work queued
        before its last `record_marker` has finished (the receiver pools them)."""
        return torch.cuda.Event()

    def record_marker(self, marker: Any, index: int) -> None:
        marker.record(torch.cuda.current_stream(index))

    def message_view(self, segment: Segment, offset: int, size: int, index: int) -> tuple[torch.Tensor, Any]:
        """A uint8 tensor over ``[offset, offset + size)`` of `segment`, and the object whose
        death means every view of it is gone."""
        memory = _MessageMemory(segment.base + offset, size, segment)
        with torch.cuda.device(index):
            view = torch.as_tensor(memory, device=torch.device("cuda", index))
        return view, memory


@functools.lru_cache(maxsize=1)
def _driver():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuMemGetAddressRange_v2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
    fn.restype = ctypes.c_int
    return fn


_warned_range = False


def _allocation_range(address: int) -> tuple[int, int] | None:
    """(base, size) of the device allocation containing `address`, from the driver; None if it
    cannot tell (then a hostile offset is only bounded by what the producer's ledger vouches for)."""
    global _warned_range
    fn = _driver()
    if fn is not None:
        base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
        if fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(address)) == 0 and size.value:
            return base.value, size.value
    if not _warned_range:
        _warned_range = True
        log.warning("cuda-ipc: the driver did not report the size of an opened segment; offsets are not bounds-checked")
    return None
