"""A CPU stand-in for tensor_codec/cuda_ipc/backend.py, so the CUDA IPC protocol runs on any machine,
between real processes too, and every device operation is counted.

"GPU memory" is memory-mapped files (one per segment, in `directory`, `TC_FAKE_GPU_DIR` for the
processes a test starts) carved by a bump allocator into 64 KiB segments, the way torch's caching
allocator packs many tensors into one cudaMalloc block: a message's offset inside its segment is
rarely 0 (failure mode 1). A handle names its segment's file, so another process opens the same
bytes, as cudaIpcOpenMemHandle would. Events are random 64-byte handles; a receiver's waits are
recorded so tests can check it waited on the event of the message it read. Markers complete as
`markers_done` says when they are recorded.

`ops` counts every call by name: the set-up operations (allocate, export, new_event, open_segment,
open_event, new_marker, retire) and the per-message ones (record, wait, record_marker,
message_view). The steady-state contract (tests/ipc/test_ipc_steady_state.py) is asserted on it.
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from tensor_codec.cuda_ipc.backend import MessageMemory, Segment

SEGMENT_BYTES = 64 << 10
GRANULE = 512
ENV_DIR = "TC_FAKE_GPU_DIR"
SETUP_OPS = ("allocate", "export", "new_event", "open_segment", "open_event", "new_marker")
_NAME = re.compile(rb"^tcfake-[0-9]+-[0-9]+$")
_serial = itertools.count()


class _Memory(MessageMemory):
    """Like backend._MessageMemory, with numpy's array interface instead of CUDA's."""

    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, size: int, segment):
        super().__init__(segment)
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 3}


@dataclass(eq=False)
class Marker:
    done: bool = True

    def query(self) -> bool:
        return self.done


@dataclass(eq=False)
class FakeEvent:
    handle: bytes
    records: int = 0


@dataclass
class FakeStream:
    name: str = "default"


@dataclass
class _Mapped:
    """An mmap'ed segment file and a uint8 tensor over it (the mapping lives as long as the tensor)."""

    map: mmap.mmap
    tensor: torch.Tensor
    names: list = field(default_factory=list)


def _map(path: str, size: int | None) -> _Mapped:
    fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if size is not None else 0), 0o600)
    try:
        if size is not None:
            os.ftruncate(fd, size)
        m = mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return _Mapped(m, torch.frombuffer(m, dtype=torch.uint8))


class FakeBackend:
    def __init__(self, gpus=("GPU-00000000-1111-2222-3333-444444444444",), directory: str | None = None):
        self.gpus = list(gpus)
        self.directory = directory or os.environ.get(ENV_DIR) or tempfile.gettempdir()
        self.ops: Counter = Counter()
        self.segments: dict[bytes, torch.Tensor] = {}  # this process's own, by handle
        self.files: list[str] = []
        self.current: tuple[bytes, int] | None = None  # segment being filled, next free offset
        self._where: dict[int, tuple[bytes, int]] = {}
        self.stream = FakeStream()
        self.events_recorded: list[bytes] = []
        self.events_waited: list[bytes] = []
        self.opened: list[bytes] = []
        self.markers: list[Marker] = []  # one entry per record_marker
        self.markers_done = True
        self.restored_onto: list[int] = []  # torch_device calls: host bytes restored onto GPU index

    def setup_ops(self) -> int:
        """Set-up operations so far (none may happen in steady state)."""
        return sum(self.ops[name] for name in SETUP_OPS)

    def close(self) -> None:
        """Remove this process's segment files (mappings stay valid while tensors use them)."""
        for path in self.files:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.files.clear()

    # identity
    def gpu_uuid(self, index):
        return self.gpus[index]

    def local_index(self, uuid):
        return self.gpus.index(uuid) if uuid in self.gpus else None

    def visible_gpus(self):
        return list(self.gpus)

    def torch_device(self, index):
        self.restored_onto.append(index)  # not a device operation: which "GPU" host bytes went to
        return torch.device("cpu")  # its "GPU" memory is CPU memory

    def current_stream(self, index):
        return self.stream

    # producer
    def device_index_of(self, t):
        return 0 if t.device.type == "cpu" else None

    def _new_segment(self, size: int) -> bytes:
        name = f"tcfake-{os.getpid()}-{next(_serial)}"
        path = os.path.join(self.directory, name)
        mapped = _map(path, size)
        mapped.tensor.fill_(0xAB)
        self.files.append(path)
        handle = b"\x01c" + name.encode().ljust(64, b"\0")
        self.segments[handle] = mapped.tensor
        return handle

    def allocate(self, nbytes, index):
        self.ops["allocate"] += 1
        size = (nbytes + GRANULE - 1) // GRANULE * GRANULE
        if self.current is None or self.current[1] + size > SEGMENT_BYTES or size > SEGMENT_BYTES:
            self.current = (self._new_segment(max(SEGMENT_BYTES, size)), 0)
        handle, offset = self.current
        self.current = (handle, offset + size)
        buffer = self.segments[handle][offset : offset + nbytes]
        buffer.fill_(0xCD)  # stale bytes: padding must be zeroed by the transport
        self._where[buffer.data_ptr()] = (handle, offset)
        return buffer

    def export(self, buffer):
        self.ops["export"] += 1
        return self._where[buffer.data_ptr()]

    def new_event(self, index):
        self.ops["new_event"] += 1
        event = FakeEvent(os.urandom(64))
        return event, event.handle

    def retire(self, buffer, event):
        self.ops["retire"] += 1

    def record(self, event, stream):
        self.ops["record"] += 1
        event.records += 1
        self.events_recorded.append(event.handle)

    def wait(self, event, index):
        self.ops["wait"] += 1
        self.events_waited.append(event.handle)

    # receiver
    def open_segment(self, handle, index, offset, size):
        self.ops["open_segment"] += 1
        name = handle[2:].rstrip(b"\0")
        if not _NAME.match(name):
            raise RuntimeError("invalid resource handle")
        try:
            mapped = _map(os.path.join(self.directory, name.decode()), None)
        except FileNotFoundError:
            raise RuntimeError("invalid resource handle") from None
        self.opened.append(handle)
        base = mapped.tensor.data_ptr()
        return Segment(mapped, base, base + mapped.tensor.numel())

    def open_event(self, handle, index):
        self.ops["open_event"] += 1
        return FakeEvent(handle)

    def message_view(self, segment, offset, size, index):
        self.ops["message_view"] += 1
        memory = _Memory(segment.base + offset, size, segment)
        return torch.from_numpy(np.asarray(memory)), memory

    def new_marker(self, index):
        self.ops["new_marker"] += 1
        return Marker()

    def record_marker(self, marker, index):
        self.ops["record_marker"] += 1
        marker.done = self.markers_done
        self.markers.append(marker)


def installed(monkeypatch, directory) -> Iterator[FakeBackend]:
    """The stand-in installed as tensor_codec's CUDA IPC backend for one test, this process both
    producer and receiver; torn down after (a fixture body: `yield from installed(...)`)."""
    from tensor_codec import plan
    from tensor_codec.cuda_ipc import identity
    from tensor_codec.cuda_ipc import transport as cuda_ipc

    backend = FakeBackend(directory=str(directory))
    cuda_ipc.use_backend(backend)
    real_check = identity.check_same_machine
    # One process plays producer and receiver: lift only the same-process refusal.
    monkeypatch.setattr(cuda_ipc, "check_same_machine", lambda producer: real_check(producer, pid=-1))
    # Its "GPU" memory is CPU memory: a message holds GPU data when it holds what it can share
    # (without this the codec sends such messages as host bytes, as it does any CPU message).
    monkeypatch.setattr(plan, "on_gpu", lambda t: backend.device_index_of(t) is not None)
    yield backend
    state = cuda_ipc._state
    cuda_ipc.use_backend(None)
    if state is not None and state.producer.has_ledger:
        state.producer.ledger.close()
    backend.close()
