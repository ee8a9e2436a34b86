"""ENGINE=nvimgcodec: NVIDIA nvImageCodec, every frame of a batch encoded in one call (the
optional extra `nvimgcodec`).

On CUDA, per batch, on a worker whose stream already waits on the frames' event
(base.PooledEngine):
  1. each frame is wrapped as it lies in memory, no copy: interleaved (a CHW view of an HWC
     frame, the camera's LAYOUT=interleaved) as I_RGB, contiguous CHW as planar P_RGB, one channel
     as I_Y; anything else is made contiguous first, on the worker's stream;
  2. one `Encoder.encode(images, cuda_stream=<worker's stream>)` per channel count: nvImageCodec
     makes its own work wait on that stream (GPU-side), so frames are read after the producer's
     work with no host wait for it;
  3. an event recorded on the worker's stream after the call is waited on before the bytes are
     read and before the inputs may be freed: no device-wide synchronise, and no host wait per
     frame, only one per batch.
Colour frames are written 4:2:0 or 4:4:4 (SUBSAMPLING), greyscale as one component (as equal RGB
where the backend has no one-component encoder).

On CUDA the encoders are built on GPU backends named explicitly, those this machine can create
(common/nvimgcodec_backend: on an H100 GPU_ONLY cannot be, HYBRID_CPU_GPU can). Step 2's
ordering was reasoned about for GPU_ONLY and has not run on HYBRID_CPU_GPU (whose CPU stage may
read what the GPU stage wrote on its own terms): until a GPU run shows seed 002 passing on it, the
worker also waits on the host for the frames' event before the call (host_waits_for_frames, one
wait per batch, for frames the encode could not start before anyway).
On the CPU (only when ENGINE=nvimgcodec is asked for) the same calls run on nvImageCodec's CPU
backends with host frames.
"""

from __future__ import annotations

import torch

from ...common.jpeg_engines import unavailable
from ...common.nvimgcodec_backend import CUDA_ENCODE_BACKENDS, CodecPerThread
from .base import PooledEngine, as_rgb3

__all__ = ["NvImgCodecEngine"]


class NvImgCodecEngine(PooledEngine):
    name = "nvimgcodec"
    host_waits_for_frames = True  # on CUDA, until its backend's stream ordering is seen on a GPU (above)

    def __init__(self, device: torch.device, quality: int, subsampling: str, workers: int):
        device = torch.device(device)
        reason = unavailable(self.name, device.type)  # imports it quietly (see jpeg_engines)
        if reason:
            raise RuntimeError(reason)
        from nvidia import nvimgcodec

        self._nv = nvimgcodec
        self.quality = quality
        css = {"420": nvimgcodec.ChromaSubsampling.CSS_420, "444": nvimgcodec.ChromaSubsampling.CSS_444}
        if subsampling not in css:
            raise ValueError(f"subsampling: expected 420 or 444, got {subsampling!r}")
        quality_params = dict(quality_type=nvimgcodec.QualityType.QUALITY, quality_value=float(quality))
        self._params = {
            3: nvimgcodec.EncodeParams(**quality_params, chroma_subsampling=css[subsampling]),
            1: nvimgcodec.EncodeParams(**quality_params, chroma_subsampling=nvimgcodec.ChromaSubsampling.CSS_GRAY),
        }
        self._encoder = CodecPerThread(nvimgcodec, nvimgcodec.Encoder, device, CUDA_ENCODE_BACKENDS)
        super().__init__(device, workers, subsampling)
        self._encoder()  # built now: a failure is the node's start-up error, not every batch's

    def describe(self) -> str:
        on = f", {self._encoder.describe()}" if self.device.type == "cuda" else ""
        return f"{self.name} on {self.device} (batched, {self.subsampling}{on})"

    def _image(self, frame: torch.Tensor, stream: int):
        """Step 1: the frame as an nvImageCodec image, without a copy where its layout allows."""
        nv = self._nv
        if frame.shape[0] == 1:
            view, layout = frame.reshape(frame.shape[1], frame.shape[2], 1), nv.SampleFormat.I_Y
            if not view.is_contiguous():
                view = view.contiguous()
        elif frame.permute(1, 2, 0).is_contiguous():
            view, layout = frame.permute(1, 2, 0), nv.SampleFormat.I_RGB
        else:
            view, layout = frame.contiguous(), nv.SampleFormat.P_RGB
        source = view if self.device.type == "cuda" else view.numpy()
        return nv.as_image(source, stream, sample_format=layout), view

    def encode(self, frames: list[torch.Tensor]) -> list[torch.Tensor]:
        cuda = self.device.type == "cuda"
        stream = torch.cuda.current_stream(self.device) if cuda else None
        handle = stream.cuda_stream if cuda else 0
        out: list[torch.Tensor | None] = [None] * len(frames)
        groups: dict[int, list[int]] = {}
        for i, f in enumerate(frames):
            groups.setdefault(int(f.shape[0]), []).append(i)
        keep = []  # the views the images wrap: alive until the encode is known to be done
        results = {}
        for channels, indices in groups.items():
            wrapped = [self._image(frames[i], handle) for i in indices]
            keep.extend(view for _, view in wrapped)
            streams = self._encoder().encode(
                [image for image, _ in wrapped], "jpeg", params=self._params[channels], cuda_stream=handle
            )
            results.update(zip(indices, streams))  # step 2
            refused = [i for i in indices if results.get(i) is None]
            if channels == 1 and refused:
                # A backend without a one-component encoder: the same luma as equal RGB (the
                # message's `channels: 1` makes the decoder restore one channel).
                wrapped = [self._image(as_rgb3(frames[i]).contiguous(), handle) for i in refused]
                keep.extend(view for _, view in wrapped)
                streams = self._encoder().encode(
                    [image for image, _ in wrapped], "jpeg", params=self._params[3], cuda_stream=handle
                )
                results.update(zip(refused, streams))
        if cuda:
            done = torch.cuda.Event()
            done.record(stream)  # step 3
            done.synchronize()
        del keep
        for i in range(len(frames)):
            code = results.get(i)
            if code is None:
                raise RuntimeError(f"nvImageCodec could not encode frame {i} of the batch ({tuple(frames[i].shape)})")
            out[i] = torch.frombuffer(bytearray(memoryview(code)), dtype=torch.uint8)  # owned by torch
        return out  # type: ignore[return-value]
