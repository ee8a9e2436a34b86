"""A sending process's message buffers: GPU memory with its own interprocess event, both exported
once (hundreds of microseconds) and reused. Why, when a buffer comes back, size classes, the idle
bound, retiring, and the one stream-order hazard: docs/cuda-ipc-design.md, "As built" (its first
item).
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from ..errors import EncodeError
from ..wire.buffer import CUDA_IPC_ALIGNMENT

__all__ = ["MessageBuffer", "BufferPool", "size_class", "MIN_CLASS_BYTES", "DEFAULT_MAX_IDLE_BYTES"]

log = logging.getLogger("tensor_codec")

MIN_CLASS_BYTES = 4096
DEFAULT_MAX_IDLE_BYTES = 1 << 30  # per process: one output's default cap on bytes in flight


def size_class(nbytes: int) -> int:
    """The buffer size a message of `nbytes` takes: 4 KiB, or `nbytes` rounded up to a quarter of
    the power of two below it (4 KiB, 5, 6, 7, 8, 10, 12, 14, 16 KiB, ...)."""
    if nbytes <= MIN_CLASS_BYTES:
        return MIN_CLASS_BYTES
    step = (1 << (nbytes.bit_length() - 1)) >> 2
    return -(-nbytes // step) * step


@dataclass(eq=False)
class MessageBuffer:
    """GPU memory for one message at a time, exported once: its segment handle and offset, and
    an interprocess event (with its handle) recorded after each message's last write."""

    tensor: Any  # uint8, `capacity` bytes
    capacity: int
    index: int  # the GPU
    handle: bytes
    offset: int  # of the buffer inside the segment `handle` names
    event: Any
    event_handle: bytes
    stream: Any = None  # where the last message was written (None: never written)
    metadata: dict | None = None  # the keys every message in it carries alike (made at its first)
    views: dict = field(default_factory=dict)  # (dtype, shape, strides) -> its memory viewed so (prepared sends)


class BufferPool:
    """Idle message buffers of this process, per (GPU, size class), and the events of retired
    buffers, kept for the next new buffer (never destroyed: cuda-ipc-design.md, "As built")."""

    def __init__(self, backend: Any, *, max_idle_bytes: int = DEFAULT_MAX_IDLE_BYTES):
        self.backend = backend
        self.max_idle_bytes = max_idle_bytes
        self.idle: dict[tuple[int, int], list[MessageBuffer]] = {}  # per class, the warmest last
        self.by_age: collections.OrderedDict[int, MessageBuffer] = collections.OrderedDict()  # oldest first
        self.idle_bytes = 0
        self.spare_events: dict[int, list[tuple[Any, bytes]]] = {}  # per GPU
        self.unretired: list[MessageBuffer] = []  # buffers whose retiring failed: kept, never reused
        self.lock = threading.Lock()
        self.made = 0
        self.reused = 0
        self.retired = 0
        self.events_made = 0

    def take_idle(self, nbytes: int, index: int) -> MessageBuffer | None:
        """An idle buffer for `nbytes` on GPU `index`, or None where none is idle."""
        capacity = size_class(nbytes)
        with self.lock:
            free = self.idle.get((index, capacity))
            if not free:
                return None
            buffer = free.pop()
            del self.by_age[id(buffer)]
            self.idle_bytes -= capacity
            self.reused += 1
            return buffer

    def take(self, nbytes: int, index: int) -> MessageBuffer:
        """A buffer of at least `nbytes` on GPU `index`: an idle one, or a new one exported now."""
        buffer = self.take_idle(nbytes, index)
        if buffer is not None:
            return buffer
        capacity = size_class(nbytes)
        backend = self.backend
        tensor = backend.allocate(capacity, index)
        handle, offset = backend.export(tensor)
        if offset % CUDA_IPC_ALIGNMENT:  # receivers refuse such a message (wire.cuda_ipc.parse_ipc_fields)
            raise EncodeError(
                f"CUDA IPC: the allocator placed a message buffer at byte {offset} of its segment, expected a "
                f"multiple of {CUDA_IPC_ALIGNMENT} (torch's caching allocator's blocks are): every receiver would "
                f"refuse its messages; use torch's default allocator, or send host bytes (transport='host')"
            )
        with self.lock:  # (after the checks: a refused buffer takes no spare event with it)
            spare = self.spare_events.get(index)
            event_and_handle = spare.pop() if spare else None
        made_event = event_and_handle is None
        if event_and_handle is None:
            event_and_handle = backend.new_event(index)
        with self.lock:
            self.made += 1
            self.events_made += made_event
        return MessageBuffer(tensor, capacity, index, handle, offset, *event_and_handle)

    def give_back(self, *buffers: MessageBuffer) -> None:
        """Every receiver is done with these buffers' messages: keep them for the next. Past the
        idle bound the buffers idle longest are retired (not the last one given back: a stream
        that changed sizes keeps its new buffers and lets the old sizes go)."""
        with self.lock:
            for buffer in buffers:
                self.idle.setdefault((buffer.index, buffer.capacity), []).append(buffer)
                self.by_age[id(buffer)] = buffer
                self.idle_bytes += buffer.capacity
            evicted = []
            while self.idle_bytes > self.max_idle_bytes and len(self.by_age) > 1:
                _, oldest = self.by_age.popitem(last=False)
                self.idle[(oldest.index, oldest.capacity)].remove(oldest)
                self.idle_bytes -= oldest.capacity
                evicted.append(oldest)
        self._retire(evicted)

    def trim(self) -> int:
        """Retire every idle buffer (their memory goes back to torch's caching allocator); -> how many."""
        with self.lock:
            idle = list(self.by_age.values())
            self.idle.clear()
            self.by_age.clear()
            self.idle_bytes = 0
        self._retire(idle)
        return len(idle)

    def _retire(self, buffers: list[MessageBuffer]) -> None:
        for buffer in buffers:
            try:
                self.backend.retire(buffer.tensor, buffer.event)  # waits for its last write
            except Exception as e:  # one buffer's trouble must not keep the others from retiring
                log.warning("cuda-ipc: could not retire a message buffer: %s: %s", type(e).__name__, e)
                with self.lock:  # its last write may still run and receivers may hold its event: kept
                    self.unretired.append(buffer)
                continue
            with self.lock:
                self.retired += 1
                self.spare_events.setdefault(buffer.index, []).append((buffer.event, buffer.event_handle))

    def stats(self) -> dict:
        with self.lock:
            return {
                "buffers_made": self.made,
                "buffers_reused": self.reused,
                "buffers_retired": self.retired,
                "events_made": self.events_made,
                "idle_buffers": sum(len(free) for free in self.idle.values()),
                "idle_bytes": self.idle_bytes,
            }
