"""The decoder node's engines (ENGINE=auto|torchcodec|torchvision|nvimgcodec; see
../common/jpeg_engines.py for how `auto` chooses): JPEGs to (C, H, W) uint8 tensors on the node's
device, ordered on the caller's current stream.

The fence, on every CUDA engine: nvJPEG's hardware decoder does not honour the stream it is
given (TorchCodec documents it, reproduced on H100), and torchvision's CUDA decoder writes from a
private stream that does not wait on the caller's; both write outputs the caching allocator handed
out on the caller's stream, blocks that work queued earlier on that stream may still read. So the
caller's stream is drained first: a host wait on that one stream, not the device. Each engine
then leaves its results complete, or ordered on the caller's stream, before it returns.

Every engine applies a JPEG's EXIF orientation (TorchCodec always does; torchvision and
nvImageCodec are asked to), so a rotated photo decodes the same whichever engine runs; the
decoder node accepts a frame whose sides are the header's, in either order.
"""

from __future__ import annotations

import numpy as np
import torch

from ..common.jpeg_engines import EngineChoice, unavailable
from ..common.nvimgcodec_backend import CUDA_DECODE_BACKENDS, CodecPerThread

__all__ = ["JpegDecodeEngine", "make_decode_engine"]


class JpegDecodeEngine:
    """decode(jpegs, channels) -> one (channels, H, W) uint8 tensor on `device` per JPEG (a flat
    uint8 CPU tensor), or the exception it failed with, in its place: the others still decode."""

    name: str

    def __init__(self, device: torch.device):
        self.device = torch.device(device)

    def describe(self) -> str:
        return f"{self.name} on {self.device}"

    def decode(self, jpegs: list[torch.Tensor], channels: list[int]) -> list[torch.Tensor | Exception]:
        if not jpegs:
            return []
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()  # the fence described above
        out: list[torch.Tensor | Exception] = [None] * len(jpegs)  # type: ignore[list-item]
        groups: dict[int, list[int]] = {}
        for i, c in enumerate(channels):
            groups.setdefault(c, []).append(i)
        for c, indices in groups.items():
            batch = [jpegs[i] for i in indices]
            try:
                images = self.decode_batch(batch, c)
                if len(images) != len(batch):
                    raise RuntimeError(f"{self.name} returned {len(images)} images for {len(batch)} JPEGs")
            except Exception:
                images = [self._decode_one(j, c) for j in batch]  # find the bad one(s)
            for i, image in zip(indices, images):
                out[i] = image
        return out

    def _decode_one(self, jpeg: torch.Tensor, channels: int) -> torch.Tensor | Exception:
        try:
            return self.decode_batch([jpeg], channels)[0]
        except Exception as e:
            return e

    def decode_batch(self, jpegs: list[torch.Tensor], channels: int) -> list[torch.Tensor]:
        """All of `jpegs` to `channels` channels, or raise."""
        raise NotImplementedError


class TorchCodecDecodeEngine(JpegDecodeEngine):
    """TorchCodec's decode_jpeg: libjpeg-turbo on the CPU; on CUDA one batched nvJPEG call on the
    caller's current stream, which TorchCodec host-synchronises before it returns."""

    name = "torchcodec"

    def __init__(self, device: torch.device):
        super().__init__(device)
        from torchcodec.decoders import decode_jpeg

        self._decode = decode_jpeg

    def decode_batch(self, jpegs, channels):
        mode = "GRAY" if channels == 1 else "RGB"
        if self.device.type == "cuda":
            return list(self._decode(list(jpegs), mode=mode, device=self.device))
        return [self._decode(j, mode=mode) for j in jpegs]


class TorchvisionDecodeEngine(JpegDecodeEngine):
    """torchvision.io.decode_jpeg (deprecated since torchvision 0.29): its CUDA decoder ends by
    making the caller's stream wait on its own, so results are ordered there."""

    name = "torchvision"

    def __init__(self, device: torch.device):
        super().__init__(device)
        from torchvision.io import ImageReadMode, decode_jpeg

        self._decode = decode_jpeg
        self._modes = {1: ImageReadMode.GRAY, 3: ImageReadMode.RGB}

    def decode_batch(self, jpegs, channels):
        mode = self._modes[channels]
        if self.device.type == "cuda":
            return list(self._decode(list(jpegs), mode=mode, device=self.device, apply_exif_orientation=True))
        return [self._decode(j, mode=mode, apply_exif_orientation=True) for j in jpegs]  # the CPU call loops anyway


class NvImgCodecDecodeEngine(JpegDecodeEngine):
    """nvImageCodec: one batched decode on the caller's current stream (its GPU backends on CUDA,
    its CPU backends on the CPU). Its images live in nvImageCodec's own memory: each is copied
    into a torch tensor (CHW, from the interleaved result) on the caller's stream, so what the
    node sends comes from torch's allocator (CUDA IPC shares only that), and nvImageCodec's
    buffers are released once that copy is done.

    One nvImageCodec Decoder per thread: one shared by the decoder node's WORKERS threads fails
    batches at random ("Processing results for sample 0 was already set", then no image; seen
    with its CPU backends, 2 threads, 0.9). The first is made at start, so a decoder that cannot
    be made is the node's start-up error."""

    name = "nvimgcodec"

    def __init__(self, device: torch.device):
        super().__init__(device)
        reason = unavailable(self.name, self.device.type)
        if reason:
            raise RuntimeError(reason)
        from nvidia import nvimgcodec as nv

        self._nv = nv
        # One decoder per thread; on CUDA on GPU backends named: with none named nvImageCodec
        # decoded on its CPU backend on an H100 (~200 fps against 1,500; common/nvimgcodec_backend).
        self._decoder = CodecPerThread(nv, nv.Decoder, self.device, CUDA_DECODE_BACKENDS)
        self._decoder()  # built now: a failure is the node's start-up error
        self._params = {
            1: nv.DecodeParams(
                apply_exif_orientation=True, color_spec=nv.ColorSpec.GRAY, sample_format=nv.SampleFormat.I_Y
            ),
            3: nv.DecodeParams(
                apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB, sample_format=nv.SampleFormat.I_RGB
            ),
        }

    def describe(self) -> str:
        on = f" ({self._decoder.describe()})" if self.device.type == "cuda" else ""
        return f"{self.name} on {self.device}{on}"

    def decode_batch(self, jpegs, channels):
        nv = self._nv
        cuda = self.device.type == "cuda"
        stream = torch.cuda.current_stream(self.device) if cuda else None
        sources = [nv.CodeStream(j.numpy().tobytes()) for j in jpegs]
        images = self._decoder().decode(
            sources, params=self._params[channels], cuda_stream=stream.cuda_stream if cuda else 0
        )
        out = []
        for k, image in enumerate(images):
            if image is None:
                raise RuntimeError(f"nvImageCodec could not decode JPEG {k} of the batch")
            hwc = torch.from_dlpack(image) if cuda else torch.from_numpy(np.asarray(image.cpu()))
            if hwc.dim() == 2:
                hwc = hwc.unsqueeze(-1)
            out.append(hwc.permute(2, 0, 1).contiguous())  # torch's memory, on the caller's stream
        if cuda:
            done = torch.cuda.Event()
            done.record(stream)
            done.synchronize()  # the copies are done: nvImageCodec's images may go
        del images
        return out


def make_decode_engine(choice: EngineChoice, device: torch.device) -> JpegDecodeEngine:
    """The engine `choice` names (from choose_decoder) on `device`."""
    engines = {e.name: e for e in (TorchCodecDecodeEngine, TorchvisionDecodeEngine, NvImgCodecDecodeEngine)}
    if choice.name not in engines:
        raise ValueError(f"engine: expected one of {', '.join(engines)}, got {choice.name!r}")
    return engines[choice.name](device)
