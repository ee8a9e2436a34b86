"""Checks a received object against what its metadata promises. Raises `Mismatch` with the
field, what was expected and what came."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torchvision import tv_tensors

from ..common import protocol as P
from ..common.digest import content_digest
from ..common.images import CHANNELS
from ..common.pattern import PATTERN_NAME, read_index, render, same_pixels
from ..common.quality import compare


class Mismatch(Exception):
    """The message decoded, but is not what its sender said it sent."""


@dataclass(frozen=True)
class LossyBounds:
    """How far a frame that went through JPEG (metadata `lossy`) may be from its source."""

    min_psnr: float = 35.0
    max_mad: float = 3.0


def verify(obj: Any, metadata: dict, mode: str, lossy: LossyBounds = LossyBounds()) -> bool:
    """Raise Mismatch if `obj` is not what `metadata` promises; -> whether anything was checked
    (a message with neither a checksum nor an image description decodes, but proves nothing)."""
    if mode == "none":
        return False
    checked = False
    expected = metadata.get(P.CHECKSUM)
    if expected is not None:
        got = content_digest(obj)
        if got != expected:
            raise Mismatch(f"checksum: expected {expected}, got {got}")
        checked = True
    if metadata.get(P.ENCODING) in CHANNELS:
        verify_frame(obj, metadata, mode, lossy)
        checked = True
    return checked


def verify_frame(obj: Any, metadata: dict, mode: str, lossy: LossyBounds = LossyBounds()) -> None:
    if not isinstance(obj, tv_tensors.Image):
        raise Mismatch(f"type: expected torchvision.tv_tensors.Image, got {type(obj).__module__}.{type(obj).__qualname__}")
    channels = CHANNELS[metadata[P.ENCODING]]
    want = (channels, metadata.get(P.HEIGHT), metadata.get(P.WIDTH))
    if obj.dtype != torch.uint8 or tuple(obj.shape) != want:
        raise Mismatch(f"frame: expected uint8 of shape {want}, got {obj.dtype} of shape {tuple(obj.shape)}")
    if metadata.get(P.PATTERN) != PATTERN_NAME:
        return  # a real camera: nothing more is known about the content
    frame = metadata.get(P.FRAME)
    index = read_index(obj)
    if index is None or index != frame % 2**32:
        raise Mismatch(f"frame index in the pixels: expected {frame}, got {index if index is not None else 'unreadable'}")
    if mode == "full" and metadata.get(P.LOSSY) is not None:
        reference = render(index, want[1], want[2], channels=channels, device=obj.device)
        db, mad = compare(obj.as_subclass(torch.Tensor), reference)
        if db < lossy.min_psnr or mad > lossy.max_mad:
            raise Mismatch(
                f"pixels after {metadata.get(P.LOSSY)}: expected PSNR >= {lossy.min_psnr:g} dB and mean abs diff <= {lossy.max_mad:g} "
                f"against synthetic frame {frame}, got {db:.2f} dB and {mad:.2f}"
            )
    elif mode == "full":
        plain = obj.as_subclass(torch.Tensor)
        interleaved = channels > 1 and plain.stride(0) == 1  # rgb8 bytes: build the reference alike
        reference = render(index, want[1], want[2], channels=channels, device=obj.device, hwc=interleaved)
        if not same_pixels(plain, reference):
            differing = int((plain != reference).sum())
            raise Mismatch(f"pixels: expected synthetic frame {frame} exactly, got {differing} of {plain.numel()} values different")
