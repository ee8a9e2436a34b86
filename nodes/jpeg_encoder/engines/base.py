"""What every JPEG encoder engine shares: the submit/Future contract, a thread pool, and on CUDA
the fence against the producer's stream.

The contract: `submit(frames)` takes (C, H, W) uint8 tensors on `engine.device`, C in (1, 3), made
on the submitting thread's current stream, and returns a Future of one `Encoded` per frame, in
order. The submitter keeps no promise about the frames after submit returns. What the node needs
to know of each JPEG (its CRC-32 and the subsampling its header declares) is worked out on the
worker too: the node's main thread receives the next frames meanwhile, and every microsecond it
spends per JPEG is one the whole node spends (issue 34).

On CUDA, submit records an event on the submitter's current stream (after the frame's last
write; for a frame received by CUDA IPC, after tensor_codec made that stream wait on the
producer's event). Each worker has its own stream, which waits on that event GPU-side before
anything reads the frames: no host waits for the producer, no device-wide synchronize.
"""

from __future__ import annotations

import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import torch

from ...common.device import StreamPerThread
from ...common.jpeg_header import JpegError, read_own_header

__all__ = ["Encoded", "JpegEngine", "PooledEngine", "finish", "as_rgb3"]


class Encoded(NamedTuple):
    data: torch.Tensor  # the JPEG: flat uint8, CPU
    crc32: int  # of those bytes, computed on the worker (zlib releases the GIL)
    subsampling: str | None  # what its header declares, whatever the engine was asked for; None: unreadable
    problem: str | None = None  # why its header could not be read (the node refuses to send it)


def finish(jpegs) -> list[Encoded]:
    """Each JPEG with its CRC-32 and its frame header read back (its ends checked: an engine that
    wrote a truncated JPEG is caught here, not by whoever decodes it)."""
    out = []
    for j in jpegs:
        try:
            subsampling, problem = read_own_header(j).subsampling, None
        except JpegError as e:
            subsampling, problem = None, str(e)
        out.append(Encoded(j, zlib.crc32(j.numpy()), subsampling, problem))
    return out


def as_rgb3(frame: torch.Tensor) -> torch.Tensor:
    """nvJPEG through TorchCodec and torchvision encodes 3 channels only: greyscale is replicated
    (the same luma; the message's `channels: 1` makes the decoder restore one channel)."""
    return frame.expand(3, -1, -1) if frame.shape[0] == 1 else frame


class JpegEngine:
    """submit(frames) -> Future of one `Encoded` per frame (see the module's docstring)."""

    name: str  # the ENGINE setting's value for it
    device: torch.device
    workers: int
    subsampling: str  # "420" or "444": what colour frames are written with

    def submit(self, frames: list[torch.Tensor]) -> Future:
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.name} on {self.device}"

    def close(self) -> None:
        raise NotImplementedError


class PooledEngine(JpegEngine):
    """A pool of `workers` threads; subclasses implement `encode(frames) -> list of flat uint8 CPU
    tensors`, run on a worker with, on CUDA, the worker's own stream current and already waiting
    on the submitter's event. An encode must leave the bytes it returns complete (read only after
    the work that wrote them is known to be done)."""

    # True for an engine whose library reads the frames in a way our streams cannot order (a
    # private stream, or nvJPEG work not ordered after the worker's stream): the worker then waits
    # on the host for the frames' own event before it encodes. Before issue 37 the wait was on the
    # worker's stream, which held only the wait on that event, nothing queued behind it; with it
    # TorchCodec still encoded 1 frame in ~100 from stale memory on the H100. Whether such a stream
    # synchronize returns before the event has completed, or something else let the read through,
    # is not known yet (seed 002 will tell on the next GPU run); cudaEventSynchronize on the event
    # recorded after the frame's last write waits for that write by definition.
    host_waits_for_frames = False

    def __init__(self, device: torch.device, workers: int, subsampling: str):
        self.device = torch.device(device)
        self.workers = workers
        self.subsampling = subsampling
        self._local = threading.local()  # what a subclass keeps per worker (an encoder, a memory file)
        self.stream = StreamPerThread(self.device)  # this worker's own CUDA stream
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=f"jpeg-{self.name}")

    def submit(self, frames: list[torch.Tensor]) -> Future:
        if self.device.type != "cuda":
            return self._pool.submit(self._run_cpu, list(frames))
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(self.device))  # after the submitter's last write
        return self._pool.submit(self._run_cuda, list(frames), ready)

    def _run_cpu(self, frames: list[torch.Tensor]) -> list[Encoded]:
        return finish(self.encode(frames))

    def _run_cuda(self, frames: list[torch.Tensor], ready: torch.cuda.Event) -> list[Encoded]:
        stream = self.stream()
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            stream.wait_event(ready)  # GPU-side: nothing below reads a frame before it is made
            if self.host_waits_for_frames:
                ready.synchronize()  # and on the host, for a library that reads them off our streams
            return finish(self.encode(frames))

    def encode(self, frames: list[torch.Tensor]) -> list[torch.Tensor]:
        raise NotImplementedError

    def close(self) -> None:
        self._pool.shutdown(wait=True)
