"""A CPU stand-in for tensor_codec/cuda_ipc/backend.py, so the CUDA IPC protocol runs on any machine.

"GPU memory" is CPU memory carved out of 64 KiB segments by a bump allocator, the way torch's
caching allocator packs many tensors into one cudaMalloc block: a message's offset inside its
segment is rarely 0 (failure mode 1). Handles name segments; events are random bytes that the
receiver side checks it waited on. Everything happens in one process; the transport's
same-process refusal is lifted by the tests that use this.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from tensor_codec.cuda_ipc.backend import Segment

SEGMENT_BYTES = 64 << 10
GRANULE = 512


class _Memory:
    """Like cuda_backend._MessageMemory, with numpy's array interface instead of CUDA's."""

    __slots__ = ("__array_interface__", "segment", "__weakref__")

    def __init__(self, address: int, size: int, segment):
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 3}
        self.segment = segment


@dataclass
class Marker:
    done: bool = True

    def query(self) -> bool:
        return self.done


class FakeBackend:
    name = "fake"

    def __init__(self, gpus=("GPU-00000000-1111-2222-3333-444444444444",)):
        self.gpus = list(gpus)
        self.segments: dict[bytes, torch.Tensor] = {}
        self.current: tuple[bytes, int] | None = None  # segment being filled, next free offset
        self.events_recorded: list[bytes] = []
        self.events_waited: list[bytes] = []
        self.opened: list[bytes] = []
        self.markers: list[Marker] = []
        self.markers_done = True
        self.live_staging = 0

    # identity
    def gpu_uuid(self, index):
        return self.gpus[index]

    def local_index(self, uuid):
        return self.gpus.index(uuid) if uuid in self.gpus else None

    def visible_gpus(self):
        return list(self.gpus)

    def current_index(self):
        return 0

    # producer
    def device_index_of(self, t):
        return 0 if t.device.type == "cpu" else None

    def stage(self, nbytes, index):
        size = (nbytes + GRANULE - 1) // GRANULE * GRANULE
        if self.current is None or self.current[1] + size > SEGMENT_BYTES or size > SEGMENT_BYTES:
            handle = os.urandom(66)
            handle = b"\x01c" + handle[2:]
            self.segments[handle] = torch.full((max(SEGMENT_BYTES, size),), 0xAB, dtype=torch.uint8)
            self.current = (handle, 0)
        handle, offset = self.current
        self.current = (handle, offset + size)
        staging = self.segments[handle][offset : offset + nbytes]
        staging.fill_(0xCD)  # stale bytes: padding must be zeroed by the transport
        self._where = getattr(self, "_where", {})
        self._where[staging.data_ptr()] = (handle, offset)
        return staging

    def share(self, staging):
        return self._where[staging.data_ptr()]

    def record_ready(self, index):
        handle = os.urandom(64)
        self.events_recorded.append(handle)
        return object(), handle

    # receiver
    def open_segment(self, handle, index, offset, size):
        if handle not in self.segments:
            raise RuntimeError("invalid resource handle")
        self.opened.append(handle)
        seg = self.segments[handle]
        return Segment(seg, seg.data_ptr(), seg.data_ptr() + seg.numel())

    def wait_ready(self, event_handle, index):
        self.events_waited.append(event_handle)

    def message_view(self, segment, offset, size, index):
        memory = _Memory(segment.base + offset, size, segment)
        return torch.from_numpy(np.asarray(memory)), memory

    def done_marker(self, index):
        marker = Marker(self.markers_done)
        self.markers.append(marker)
        return marker
