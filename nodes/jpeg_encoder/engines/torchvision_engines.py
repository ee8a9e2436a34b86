"""ENGINE=torchvision: torchvision.io's JPEG encoders (deprecated since torchvision 0.29 in favour of
TorchCodec; kept for an older torch where TorchCodec does not import), stream-correct by
construction whatever torchvision version runs.

Failure mode 2: torchvision's CUDA encoder encodes on a private stream that never waits on the
caller's stream. Through 0.21 it also recorded its "done" event *before* the encode and copied
the bitstream out on the legacy default stream. From 0.22 (vision PR #8929) each encode first
host-synchronizes one stream and, when done, makes that stream wait on the private one; but that
stream is the one that was current when the process-wide encoder object was *built* (or the
legacy default stream, in one port), not the caller's. So a worker whose stream is not that one
reads JPEG bytes the private stream is still writing, and every encode host-waits on whatever
stream built the encoder. Hence, in this engine:

  0. at start, the encoder is built on the default stream (a 16x16 encode), and a probe checks
     that the default stream is what it fences (a kernel queued there must be finished when an
     encode from another stream returns). If something in this process built it earlier on
     another stream, or the probe cannot tell, every encode ends with a device-wide synchronize:
     slower, never wrong (logged once);
  1. each worker, on its own stream, waits (GPU-side) on the event recorded after the frame was
     made, and on the host for that event itself (base.PooledEngine, host_waits_for_frames),
     prepares the frame (contiguous, 3 channels) and host-waits for *its own stream only*: the
     private stream cannot be made to wait on ours, so the input must be complete before the call
     is made (no device-wide sync; other streams keep running);
  2. calls encode_jpeg;
  3. makes its stream wait on an event recorded on the default stream after the call: that stream
     waits on the private one from 0.22 on, and carried the bitstream copy before;
  4. copies the bytes to pinned host memory on its stream, records an event after that copy and
     reads the bytes only once that event has completed.

The CPU engine runs torchvision's CPU encoder on a thread pool. Both write 4:2:0 (CPU, libjpeg's
default) and 4:4:4 (nvJPEG) only.
"""

from __future__ import annotations

import logging

import torch
from torchvision.io import encode_jpeg

from .base import PooledEngine, as_rgb3

__all__ = [
    "TorchvisionCpuEngine",
    "TorchvisionCudaEngine",
    "encoder_fences_default_stream",
    "FENCE_DEFAULT_STREAM",
    "FENCE_DEVICE_SYNC",
]

log = logging.getLogger("jpeg-encoder")


class TorchvisionCpuEngine(PooledEngine):
    name = "torchvision"

    def __init__(self, quality: int, workers: int):
        super().__init__(torch.device("cpu"), workers, "420")
        self.quality = quality

    def encode(self, frames: list[torch.Tensor]) -> list[torch.Tensor]:
        return encode_jpeg(frames, quality=self.quality)


FENCE_DEFAULT_STREAM = "default-stream"
FENCE_DEVICE_SYNC = "device-sync"
PROBE_SLEEP_CYCLES = 100_000_000  # a kernel of 50 to 100 ms at 1 to 2 GHz; an encode of 16x16 takes ~1 ms


def encoder_fences_default_stream(device: torch.device) -> bool | None:
    """Whether torchvision's process-wide CUDA encoder fences the default stream: a kernel queued
    there must be finished when an encode made from another stream returns (the encoder host-waits
    on its fence stream before it starts). None when nothing can be concluded (no way to queue
    such a kernel here, or the host stalled until it had ended before the encode began).

    A wrong True would mean corrupt JPEGs, so the probe is made hard to fool: the side stream
    encodes once first (its first allocation, nvJPEG's buffers for this size: nothing on the
    probed path may synchronise the device), and the kernel must still be running when the
    encode starts."""
    if not hasattr(torch.cuda, "_sleep"):
        return None
    tiny = torch.zeros(3, 16, 16, dtype=torch.uint8, device=device)
    default, side = torch.cuda.default_stream(device), torch.cuda.Stream(device)
    with torch.cuda.device(device):
        with torch.cuda.stream(side):
            encode_jpeg(tiny)  # warm: nothing below allocates
        torch.cuda.synchronize(device)
        for cycles in (PROBE_SLEEP_CYCLES, 4 * PROBE_SLEEP_CYCLES):
            slept = torch.cuda.Event()
            with torch.cuda.stream(default):
                torch.cuda._sleep(cycles)
                slept.record(default)  # not default.query(): the stream also waits on the encoder's tail
            if slept.query():  # over before the encode could start: no evidence either way
                torch.cuda.synchronize(device)
                continue
            with torch.cuda.stream(side):
                encode_jpeg(tiny)
            fenced = slept.query()
            torch.cuda.synchronize(device)
            return fenced
    return None


def bind_encoder_to_default_stream(device: torch.device) -> str:
    """Build torchvision's CUDA encoder on the default stream (a no-op when this process built it
    already) and say how encodes must be fenced: FENCE_DEFAULT_STREAM when the probe shows the
    encoder fences that stream, FENCE_DEVICE_SYNC otherwise (or when it cannot tell).

    The encoder is one object per process and per GPU: code that later encodes on another GPU in
    this process makes torchvision rebuild it on whatever stream is current then. An engine is
    meant to be the process's only user of torchvision's CUDA encoder (the node's case)."""
    with torch.cuda.device(device), torch.cuda.stream(torch.cuda.default_stream(device)):
        encode_jpeg(torch.zeros(3, 16, 16, dtype=torch.uint8, device=device))
    torch.cuda.synchronize(device)
    fenced = encoder_fences_default_stream(device)
    if fenced:
        return FENCE_DEFAULT_STREAM
    log.warning(
        "torchvision's CUDA JPEG encoder %s: every encode ends with a device-wide synchronize (correct, slower)",
        "fences another stream (something built it earlier in this process)"
        if fenced is False
        else "could not be probed",
    )
    return FENCE_DEVICE_SYNC


class TorchvisionCudaEngine(PooledEngine):
    name = "torchvision"
    host_waits_for_frames = True  # its private stream reads them: step 1 (base.PooledEngine says why)

    def __init__(self, device: torch.device, quality: int, workers: int):
        if device.type != "cuda":
            raise ValueError(f"device: expected a CUDA device, got {device}")
        self.quality = quality
        self.fence = bind_encoder_to_default_stream(device)  # step 0
        super().__init__(device, workers, "444")

    def describe(self) -> str:
        return f"{self.name} on {self.device} (nvJPEG, fenced by the {self.fence})"

    def encode(self, frames: list[torch.Tensor]) -> list[torch.Tensor]:
        stream = torch.cuda.current_stream(self.device)  # the worker's, already waiting on the frames' event
        inputs = [as_rgb3(f).contiguous() for f in frames]
        stream.synchronize()  # step 1: inputs complete before the private stream reads them
        encoded = encode_jpeg(inputs, quality=self.quality)
        if self.fence == FENCE_DEFAULT_STREAM:
            copied = torch.cuda.Event()
            copied.record(torch.cuda.default_stream(self.device))  # step 3: after the encoder's fence
            stream.wait_event(copied)
        else:
            torch.cuda.synchronize(self.device)
        host = [e.to("cpu", non_blocking=True) for e in encoded]  # step 4: pinned, on our stream
        done = torch.cuda.Event()
        done.record(stream)
        done.synchronize()
        del inputs, encoded  # only now may the allocator hand their blocks out again
        return host
