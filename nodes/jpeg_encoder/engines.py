"""JPEG encoders that are stream-correct by construction, whatever torchvision version runs.

Failure mode 2: torchvision's CUDA encoder (read in 0.19-0.29) encodes on a private stream that
never waits on the caller's stream, records its "done" event *before* the encode, and copies the
bitstream out on the legacy default stream. Calling it plainly from a side stream therefore
reads frames still being written and returns bytes still being copied: noise at 4K in a loop,
corrupt files from several threads. So each worker here, on its own stream:

  1. waits (GPU-side) on the event recorded after the frame was made, then prepares the frame
     (contiguous, 3 channels) on its stream, and host-waits for *its own stream only*: the
     private encoder stream cannot be made to wait on ours, so the input must be complete
     before the call is made (no device-wide sync; other streams keep running);
  2. calls encode_jpeg;
  3. makes its stream wait on an event recorded on the legacy default stream (where the
     bitstream copy was queued) and copies the bytes to pinned host memory on its stream;
  4. records an event after that copy, on the encoding stream, and only reads the bytes once
     that event has completed.

A torchvision that orders its work correctly passes through the same steps unharmed. The CPU
engine runs torchvision's CPU encoder on a thread pool.
"""

from __future__ import annotations

import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import torch
from torchvision.io import encode_jpeg

__all__ = ["Encoded", "JpegEngine", "CpuJpegEngine", "CudaJpegEngine", "make_engine"]


class Encoded(NamedTuple):
    data: torch.Tensor  # the JPEG: flat uint8, CPU
    crc32: int  # of those bytes, computed on the worker (zlib releases the GIL)


def _finish(jpegs) -> list[Encoded]:
    return [Encoded(j, zlib.crc32(j.numpy())) for j in jpegs]


class JpegEngine:
    """submit(frames) -> Future of one `Encoded` per frame.

    frames: (C, H, W) uint8 tensors on `self.device`, C in (1, 3), made on the submitting
    thread's current stream. The caller keeps no promise about them after submit returns.
    """

    device: torch.device
    workers: int

    def submit(self, frames: list[torch.Tensor]) -> Future:
        raise NotImplementedError

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class CpuJpegEngine(JpegEngine):
    def __init__(self, quality: int, workers: int):
        self.device = torch.device("cpu")
        self.quality = quality
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="jpeg-cpu")

    def submit(self, frames: list[torch.Tensor]) -> Future:
        return self._pool.submit(self._encode, list(frames))

    def _encode(self, frames: list[torch.Tensor]) -> list[torch.Tensor]:
        return _finish(encode_jpeg(frames, quality=self.quality))


class CudaJpegEngine(JpegEngine):
    def __init__(self, device: torch.device, quality: int, workers: int):
        if device.type != "cuda":
            raise ValueError(f"device: expected a CUDA device, got {device}")
        self.device = device
        self.quality = quality
        self.workers = workers
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="jpeg-cuda")

    def _stream(self) -> torch.cuda.Stream:
        stream = getattr(self._local, "stream", None)
        if stream is None:
            stream = self._local.stream = torch.cuda.Stream(self.device)
        return stream

    def submit(self, frames: list[torch.Tensor]) -> Future:
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(self.device))  # after the submitter's last write
        return self._pool.submit(self._encode, list(frames), ready)

    def _encode(self, frames: list[torch.Tensor], ready: torch.cuda.Event) -> list[torch.Tensor]:
        stream = self._stream()
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            stream.wait_event(ready)
            # nvJPEG through torchvision takes 3 contiguous channels; greyscale is replicated
            # (it encodes to the same luma, and the decoder restores one channel).
            inputs = [(f.expand(3, -1, -1) if f.shape[0] == 1 else f).contiguous() for f in frames]
            stream.synchronize()  # step 1: inputs complete before the private stream reads them
            encoded = encode_jpeg(inputs, quality=self.quality)
            copied = torch.cuda.Event()
            copied.record(torch.cuda.default_stream(self.device))  # step 3: after the bitstream copy
            stream.wait_event(copied)
            host = [e.to("cpu", non_blocking=True) for e in encoded]  # pinned, on our stream
            done = torch.cuda.Event()
            done.record(stream)  # step 4: after the encode and the copy, on the encoding stream
            done.synchronize()
            del inputs, encoded  # only now may the allocator hand their blocks out again
        return _finish(host)


def make_engine(device: torch.device, quality: int, workers: int) -> JpegEngine:
    if device.type == "cuda":
        return CudaJpegEngine(device, quality, workers)
    return CpuJpegEngine(quality, workers)
