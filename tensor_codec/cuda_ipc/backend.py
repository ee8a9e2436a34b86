"""The only place that talks to CUDA for the CUDA IPC transport, through torch's own APIs.

The transport (``transport.py``) does the protocol: plans, ledger, caps, validation,
lifetimes. This backend does the few device operations it needs, so a CPU stand-in with the same
methods (tests/support/ipc_fake_backend.py) can drive the whole protocol on a machine without a GPU.

Facts this rests on (torch 2.14, see docs/cuda-ipc-design.md):

* ``UntypedStorage._share_cuda_()`` names the caching-allocator *segment* holding a storage (the
  cudaMalloc block) and the storage's byte offset inside it; it also takes a slot in torch's
  shared ref counter, which we hand back at once (`_release_ipc_counter_cuda`): our ledger, not
  torch's counter, decides when the memory may be reused.
* ``UntypedStorage._new_shared_cuda(...)`` opens such a segment in another process (cudaIpc-
  OpenMemHandle, slow: milliseconds) and returns a storage at base + offset.
* A ``__cuda_array_interface__`` object given to ``torch.as_tensor`` becomes a tensor whose storage
  holds a reference to that object and drops it when the storage dies: the receiver's signal that
  every view of a message is gone, without polling and without a host sync.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from dataclasses import dataclass
from typing import Any

import torch

from .identity import gpu_uuid, local_index_of_uuid

__all__ = ["CudaBackend", "Segment"]

log = logging.getLogger("tensor_codec")

_NO_COUNTER = b"/tc-no-torch-counter"  # receivers never touch torch's ref counter: see open_segment
_ZERO_EVENT = bytes(64)


@dataclass
class Segment:
    """An opened producer segment: `keepalive` keeps the mapping open (c10 closes it when the last
    storage of the segment dies); `base` is the address torch's offsets count from in this
    process; `end` the end of the mapped allocation when the driver could tell (None: unknown)."""

    keepalive: Any
    base: int
    end: int | None


class _MessageMemory:
    """One received message's bytes as a ``__cuda_array_interface__``; torch keeps a reference to
    it for as long as any view of the message lives."""

    __slots__ = ("__cuda_array_interface__", "segment", "__weakref__")

    def __init__(self, address: int, size: int, segment: Segment):
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 2,
            "strides": None,
        }
        self.segment = segment  # the mapping stays open while the message is in use


class CudaBackend:
    name = "cuda"

    # ---- identity
    def gpu_uuid(self, index: int) -> str:
        return gpu_uuid(index)

    def local_index(self, uuid: str) -> int | None:
        return local_index_of_uuid(uuid)

    def visible_gpus(self) -> list[str]:
        return [gpu_uuid(i) for i in range(torch.cuda.device_count())]

    # ---- producer
    def device_index_of(self, t: torch.Tensor) -> int | None:
        """The GPU a leaf lives on, None for a CPU leaf (copied up into the message)."""
        return t.device.index if t.device.type == "cuda" else None

    def stage(self, nbytes: int, index: int) -> torch.Tensor:
        """A fresh buffer for one message, allocated on the current stream (the stream that will
        write it, so the caching allocator orders its reuse after that stream's work)."""
        return torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", index))

    def share(self, staging: torch.Tensor) -> tuple[bytes, int]:
        """-> (torch's handle of the segment holding `staging`, the byte offset of `staging` in it)."""
        storage = staging.untyped_storage()
        _device, handle, _size, offset, counter_handle, counter_offset, _event, _sync = storage._share_cuda_()
        # Give torch's per-share counter back now, so a freed staging block returns to the caching
        # allocator at once instead of waiting in torch's limbo for ipc_collect().
        torch.UntypedStorage._release_ipc_counter_cuda(counter_handle, counter_offset)
        return bytes(handle), int(offset) + staging.storage_offset()

    def record_ready(self, index: int) -> tuple[Any, bytes]:
        """A fresh interprocess event recorded on the current stream, after the copies that wrote
        the message. -> (the event, kept alive by the producer until every receiver is done; its
        64-byte handle)."""
        with torch.cuda.device(index):
            event = torch.cuda.Event(interprocess=True)
            event.record(torch.cuda.current_stream(index))
            return event, bytes(event.ipc_handle())

    # ---- receiver
    def open_segment(self, handle: bytes, index: int, offset: int, size: int) -> Segment:
        """Open a producer's segment (slow; the transport caches the result)."""
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

    def wait_ready(self, event_handle: bytes, index: int) -> None:
        """The current stream waits (on the GPU) for the producer's event."""
        with torch.cuda.device(index):
            event = torch.cuda.Event.from_ipc_handle(index, event_handle)
            torch.cuda.current_stream(index).wait_event(event)

    def message_view(self, segment: Segment, offset: int, size: int, index: int) -> tuple[torch.Tensor, Any]:
        """A uint8 tensor over ``[offset, offset + size)`` of `segment`, and the object whose
        death means every view of it is gone."""
        memory = _MessageMemory(segment.base + offset, size, segment)
        with torch.cuda.device(index):
            view = torch.as_tensor(memory, device=torch.device("cuda", index))
        return view, memory

    def done_marker(self, index: int) -> Any:
        """An event on the current stream; its ``query()`` turns True once this process's work
        queued so far (its last use of a message) has finished."""
        with torch.cuda.device(index):
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(index))
            return event

    def current_index(self) -> int:
        return torch.cuda.current_device()


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
