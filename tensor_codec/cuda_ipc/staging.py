"""Copies between GPU memory and pageable host memory (dora's buffers), through pinned memory.

A copy between the GPU and pageable memory is done by the driver through its own small pinned
bounce buffer, one piece after the other, and is slower than one from pinned memory. dora's send
and receive buffers are shared memory we cannot pin (registering them per message costs more than
the copy). So big copies are cut into chunks that go through two pinned buffers of our own, in
turn: while the GPU copies chunk i into (or out of) one buffer, the CPU moves chunk i-1 out of
(or into) the other, so the two copies overlap instead of adding up. Small copies go direct:
there the per-chunk bookkeeping costs more than it saves.

Copies run on the current CUDA stream, so a copy out of the GPU is ordered after the producer's
work on that stream, and a copy onto the GPU is done when this returns (the same guarantee as
torch's blocking ``copy_``).

``TC_STAGING_MIN_BYTES``: the smallest copy that is staged (default 1 MiB; ``off`` never stages).
bench/host_staging.py measures both ways where there is a GPU.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import deque
from typing import Any

import torch

from ..errors import UsageError

__all__ = ["device_to_host", "host_to_device", "staging_threshold", "use_ops", "CHUNK_BYTES"]

CHUNK_BYTES = 4 << 20
DEFAULT_MIN_BYTES = 1 << 20
ENV_MIN_BYTES = "TC_STAGING_MIN_BYTES"


def staging_threshold() -> int | None:
    """The smallest copy that is staged; None: never (read per call, so tests and users can
    change it at run time)."""
    text = os.environ.get(ENV_MIN_BYTES, "").strip().lower()
    if not text:
        return DEFAULT_MIN_BYTES
    if text in ("off", "never", "none"):
        return None
    if text.isdigit():
        return int(text)
    raise UsageError(f"{ENV_MIN_BYTES}: expected a number of bytes or 'off', got {text!r}")


class _CudaOps:
    """What staging needs from CUDA (tests swap in a CPU stand-in with `use_ops`)."""

    def alloc_pinned(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def new_event(self) -> Any:
        return torch.cuda.Event()

    def current_stream(self, device: torch.device) -> Any:
        return torch.cuda.current_stream(device)


class _Stager:
    """Two pinned chunk buffers of one GPU, each with the event of the last copy that used it."""

    def __init__(self, ops: Any, chunk: int):
        self.ops = ops
        self.chunk = chunk
        self.lock = threading.Lock()  # the buffers are shared by every thread of the process
        self.buffers = [ops.alloc_pinned(chunk) for _ in range(2)]
        self.events = [ops.new_event() for _ in range(2)]
        self.pending = [False, False]  # an event recorded and not yet waited for

    def _free(self, slot: int) -> None:
        if self.pending[slot]:
            self.events[slot].synchronize()
            self.pending[slot] = False

    def _used(self, slot: int, stream: Any) -> None:
        self.events[slot].record(stream)
        self.pending[slot] = True

    def to_host(self, src: torch.Tensor, dst_address: int, stream: Any) -> None:
        n = src.numel()
        in_flight: deque[tuple[int, int, int]] = deque()  # (slot, offset, length) still on the GPU

        def land_oldest() -> None:
            slot, offset, length = in_flight.popleft()
            self._free(slot)
            ctypes.memmove(dst_address + offset, self.buffers[slot].data_ptr(), length)

        with self.lock:
            for i, offset in enumerate(range(0, n, self.chunk)):
                slot = i % 2
                if len(in_flight) == 2:
                    land_oldest()  # frees `slot`: the oldest chunk used it
                self._free(slot)
                length = min(self.chunk, n - offset)
                self.buffers[slot][:length].copy_(src[offset : offset + length], non_blocking=True)
                self._used(slot, stream)
                in_flight.append((slot, offset, length))
            while in_flight:
                land_oldest()

    def to_device(self, src_address: int, dst: torch.Tensor, stream: Any) -> None:
        n = dst.numel()
        last = None
        with self.lock:
            for i, offset in enumerate(range(0, n, self.chunk)):
                slot = i % 2
                self._free(slot)  # the GPU is done reading what this buffer held before
                length = min(self.chunk, n - offset)
                ctypes.memmove(self.buffers[slot].data_ptr(), src_address + offset, length)
                dst[offset : offset + length].copy_(self.buffers[slot][:length], non_blocking=True)
                self._used(slot, stream)
                last = slot
            if last is not None:
                self._free(last)  # like a blocking copy_: the data is on the GPU on return
                self._free(1 - last)


_ops: Any = None
_stagers: dict[Any, _Stager] = {}
_stagers_lock = threading.Lock()


def use_ops(ops: Any, chunk: int = CHUNK_BYTES) -> None:
    """Replace the CUDA operations (tests: a CPU stand-in); None restores CUDA."""
    global _ops, _chunk
    with _stagers_lock:
        _ops = ops
        _chunk = chunk
        _stagers.clear()


_chunk = CHUNK_BYTES


def _stager(device: torch.device) -> _Stager:
    key = (device.type, device.index)
    stager = _stagers.get(key)
    if stager is None:
        with _stagers_lock:
            stager = _stagers.get(key)
            if stager is None:
                ops = _ops or _CudaOps()
                if _ops is None:
                    with torch.cuda.device(device):
                        stager = _Stager(ops, _chunk)
                else:
                    stager = _Stager(ops, _chunk)
                _stagers[key] = stager
    return stager


def _stage(nbytes: int) -> bool:
    threshold = staging_threshold()
    return threshold is not None and nbytes >= threshold


def device_to_host(src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy a contiguous uint8 GPU tensor into a contiguous uint8 CPU tensor of the same size."""
    n = src.numel()
    if not _stage(n):
        dst.copy_(src)
        return
    ops = _ops or _CudaOps()
    _stager(src.device).to_host(src, dst.data_ptr(), ops.current_stream(src.device))


def host_to_device(src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy a contiguous uint8 CPU tensor into a contiguous uint8 GPU tensor of the same size."""
    n = dst.numel()
    if not _stage(n):
        dst.copy_(src)
        return
    ops = _ops or _CudaOps()
    _stager(dst.device).to_device(src.data_ptr(), dst, ops.current_stream(dst.device))
