"""ENGINE=torchcodec: TorchCodec's JpegEncoder, on the CPU (libjpeg-turbo, 4:2:0) and on CUDA
(nvJPEG, 4:4:4).

TorchCodec's CUDA encoder (read in 0.17's EncodeJpegCuda.cpp) encodes on the caller's current
stream, per call, with an nvJPEG encoder taken from a per-GPU pool (so workers encode at the same
time, unlike torchvision's one mutex), host-synchronises that stream (ours: no other stream, no
device-wide wait) and retrieves the bitstream into host memory before it returns. So, on a
worker whose stream already waits on the frames' event (base.PooledEngine):
  1. the frame is made 3-channel and contiguous on the worker's stream (ordered after the wait);
  2. the encode runs on that same stream: it reads the frame after the producer's work, without
     a host wait for the producer;
  3. the bytes are read only after TorchCodec's synchronisation of that stream, which follows the
     retrieval that wrote them; the inputs are freed only then (same stream, in order).
Both encoders release the GIL while they run, so WORKERS threads encode in parallel.
"""

from __future__ import annotations

import io

import torch
from torchcodec.encoders import JpegEncoder

from .base import PooledEngine, as_rgb3

__all__ = ["TorchCodecEngine"]


class TorchCodecEngine(PooledEngine):
    name = "torchcodec"

    def __init__(self, device: torch.device, quality: int, workers: int):
        self.quality = quality
        super().__init__(device, workers, "444" if torch.device(device).type == "cuda" else "420")

    def encode(self, frames: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.device.type == "cuda":
            return [self._encode_cuda(f) for f in frames]
        # libjpeg reads rows of interleaved pixels: a CHW view of an interleaved (camera) frame is
        # passed as it is, TorchCodec then reorders nothing.
        return [JpegEncoder(f).to_tensor(quality=self.quality) for f in frames]

    def _encode_cuda(self, frame: torch.Tensor) -> torch.Tensor:
        rgb = as_rgb3(frame).contiguous()  # step 1, on the worker's stream
        sink = io.BytesIO()
        # to_file_like: the bitstream is retrieved straight into host memory (one write), after
        # TorchCodec synchronised this stream (steps 2 and 3).
        JpegEncoder(rgb).to_file_like(sink, quality=self.quality)
        del rgb
        return torch.frombuffer(sink.getbuffer(), dtype=torch.uint8)
