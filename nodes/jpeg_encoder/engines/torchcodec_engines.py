"""ENGINE=torchcodec: TorchCodec's JpegEncoder, on the CPU (libjpeg-turbo, 4:2:0) and on CUDA
(nvJPEG, 4:4:4).

TorchCodec's CUDA encoder (read in 0.17's EncodeJpegCuda.cpp) encodes on the caller's current
stream, per call, with an nvJPEG encoder taken from a per-GPU pool (so workers encode at the same
time, unlike torchvision's one mutex), host-synchronises that stream and retrieves the bitstream
into host memory before it returns. That reading is not enough to rely on: on an H100
(2026-11-27, TorchCodec 0.16, torch 2.11), in one of three runs of tests/nodes/test_jpeg_seed_002.py
(4 threads encoding while other streams run heavy work), 1 of its 100 frames came out encoded
from stale memory (14.1 dB, mean abs diff 42.8 against its source), and the all-CUDA dataflow of
tests/e2e/test_nodes_e2e.py showed the same frame error once in five runs; the frame then was not
yet made when nvJPEG read it, so nvJPEG's work was not ordered after the worker's stream. A host
wait for the worker's own stream before the encode did not stop it (the H100 run of issue 37: 1
frame in 100 again, 14.10 dB): that stream held only the wait on the frames' event, nothing
queued behind it (base.PooledEngine says what is known of why). So, on a worker whose stream
already waits on the frames' event
(base.PooledEngine, host_waits_for_frames):
  1. the worker waits on the host for that event itself: the frames are complete in memory
     whichever stream nvJPEG then works on;
  2. the frame is made 3-channel and contiguous on the worker's stream, and where that queued a
     copy the worker waits on the host for its stream (real work, then, behind the wait);
  3. the encode runs; the bytes are read only after TorchCodec's synchronisation, which follows
     the retrieval that wrote them; the inputs are freed only then.
The waits, once per batch, cost the worker nothing it would not wait anyway (the encode cannot
start before the frames are made) and release the GIL.
Both encoders release the GIL while they run, so WORKERS threads encode in parallel.

On the CPU, TorchCodec's `to_tensor` writes through a Python file object: the encoder takes the
GIL back for every 64 KiB it writes, in the middle of the encode, and while the node's main thread
is busy restoring the next messages each of those waits can last up to the interpreter's switch
interval (5 ms). Writing with `to_file` into a memory file of the worker's own (memfd, Linux) and
reading the bytes back in one call needs no GIL mid-encode but costs a fixed ~50 us (open,
truncate, close). So frames of at least MEMORY_FILE_MIN_PIXELS (4K: ~260 KB, 5 callbacks) go
through the memory file and smaller ones (1080p: ~90 KB, 2 callbacks) through `to_tensor`.
Measured through the node's path on 2 cores, against torchvision in the same run (15 rounds): at
4K 85.3 fps with the memory file, 80.0 with to_tensor, 77.4 torchvision; at 1080p 360.5, 367.1
and 368.4.
"""

from __future__ import annotations

import io
import os
import threading

import torch
from torchcodec.encoders import JpegEncoder

from .base import PooledEngine, as_rgb3

__all__ = ["TorchCodecEngine"]


class TorchCodecEngine(PooledEngine):
    name = "torchcodec"
    host_waits_for_frames = True  # on CUDA: step 1 of the docstring
    memory_file_min_pixels = 4_000_000  # CPU: from this size on, encode through a memfd (see the docstring)

    def __init__(self, device: torch.device, quality: int, workers: int):
        self.quality = quality
        self._files: list[int] = []  # the workers' memory files, closed with the engine
        self._files_lock = threading.Lock()
        super().__init__(device, workers, "444" if torch.device(device).type == "cuda" else "420")

    def encode(self, frames: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.device.type == "cuda":
            return self._encode_cuda(frames)
        # libjpeg reads rows of interleaved pixels: a CHW view of an interleaved (camera) frame is
        # passed as it is, TorchCodec then reorders nothing.
        out = []
        for f in frames:
            memory = self._memory_file() if f.shape[1] * f.shape[2] >= self.memory_file_min_pixels else None
            if memory is None:
                out.append(JpegEncoder(f).to_tensor(quality=self.quality))
                continue
            fd, path = memory
            JpegEncoder(f).to_file(path, quality=self.quality)  # truncates, then writes without the GIL
            size = os.fstat(fd).st_size
            data = torch.empty(size, dtype=torch.uint8)
            if os.preadv(fd, [data.numpy()], 0) != size:
                raise OSError(f"read back {path}: expected {size} bytes")
            out.append(data)
        return out

    def _memory_file(self) -> tuple[int, str] | None:
        """This worker's memfd and a path that opens it; None where there is none (not Linux)."""
        memory = getattr(self._local, "memory", False)
        if memory is False:
            memory = None
            if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
                fd = os.memfd_create("tc-jpeg", os.MFD_CLOEXEC)
                with self._files_lock:
                    self._files.append(fd)
                memory = (fd, f"/proc/self/fd/{fd}")
            self._local.memory = memory
        return memory

    def close(self) -> None:
        super().close()
        with self._files_lock:
            files, self._files = self._files, []
        for fd in files:
            os.close(fd)

    def _encode_cuda(self, frames: list[torch.Tensor]) -> list[torch.Tensor]:
        rgbs = [as_rgb3(f).contiguous() for f in frames]  # step 2, on the worker's stream
        if any(rgb is not f for rgb, f in zip(rgbs, frames)):
            torch.cuda.current_stream(self.device).synchronize()  # the copies it queued are made
        out = []
        for rgb in rgbs:
            sink = io.BytesIO()
            # to_file_like: the bitstream is retrieved straight into host memory (one write), after
            # TorchCodec's synchronisation (step 3).
            JpegEncoder(rgb).to_file_like(sink, quality=self.quality)
            out.append(torch.frombuffer(sink.getbuffer(), dtype=torch.uint8))
        return out
