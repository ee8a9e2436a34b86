"""Frames as the image nodes exchange them: a (C, H, W) uint8 tensor, from a tensor_codec
message or from a plain dora image message (flat rgb8 / bgr8 / mono8 bytes with `width` and
`height`, the form dora's own camera and plot nodes use)."""

from __future__ import annotations

from typing import Any

import torch
from torchvision import tv_tensors

import tensor_codec as tc

from . import protocol as P

__all__ = ["CHANNELS", "FrameError", "restore_plain_image", "is_plain_image", "check_frame", "encoding_for"]

CHANNELS = {"rgb8": 3, "bgr8": 3, "mono8": 1}


class FrameError(ValueError):
    """A message decoded, but is not a frame an image node can use."""


def is_plain_image(metadata: dict) -> bool:
    """A flat-bytes image message, not a tensor_codec one (restore_plain_image names an
    encoding it cannot take)."""
    return P.ENCODING in metadata and not tc.is_codec_message(metadata)


def restore_plain_image(value: Any, metadata: dict) -> tv_tensors.Image:
    """A dora image message as a (C, H, W) tv_tensors.Image viewing the message (read it before
    the event is dropped)."""
    encoding = metadata.get(P.ENCODING)
    if encoding not in CHANNELS:
        raise tc.DecodeError(f"metadata.encoding: expected one of {', '.join(CHANNELS)}, got {encoding!r}")
    width, height = _positive_int(metadata, P.WIDTH), _positive_int(metadata, P.HEIGHT)
    channels = CHANNELS[encoding]
    flat = tc.plain_bytes(value)
    if flat.numel() != width * height * channels:
        raise tc.DecodeError(
            f"value: expected {width}x{height}x{channels} = {width * height * channels} bytes for {encoding}, got "
            f"{flat.numel()}"
        )
    chw = flat.view(height, width, channels).permute(2, 0, 1)
    if encoding == "bgr8":
        chw = chw.flip(0)
    return tv_tensors.Image(chw)


def check_frame(obj: Any) -> torch.Tensor:
    """`obj` as a plain (C, H, W) uint8 tensor with C in (1, 3), or FrameError naming the field,
    what was expected and what came. Takes a tv_tensors.Image or a plain tensor."""
    if (
        not isinstance(obj, torch.Tensor)
        or isinstance(obj, tv_tensors.TVTensor)
        and not isinstance(obj, tv_tensors.Image)
    ):
        raise FrameError(
            "frame: expected a torchvision.tv_tensors.Image (or a (C, H, W) tensor), got "
            f"{type(obj).__module__}.{type(obj).__qualname__}"
        )
    if obj.dtype != torch.uint8:
        raise FrameError(f"frame.dtype: expected torch.uint8, got {obj.dtype}")
    if obj.dim() != 3:
        raise FrameError(f"frame.shape: expected (C, H, W), got {tuple(obj.shape)}")
    channels, height, width = obj.shape
    if channels not in (1, 3):
        raise FrameError(f"frame.shape[0] (channels): expected 1 or 3, got {channels}")
    if height == 0 or width == 0:
        raise FrameError(f"frame.shape: expected a non-empty image, got {tuple(obj.shape)}")
    if height > 65500 or width > 65500:  # JPEG's own limit is 65535
        raise FrameError(f"frame.shape: expected at most 65500 px per side, got {height}x{width}")
    return obj.as_subclass(torch.Tensor)


def encoding_for(channels: int) -> str:
    return "mono8" if channels == 1 else "rgb8"


def _positive_int(metadata: dict, name: str) -> int:
    v = metadata.get(name)
    if type(v) is not int or v <= 0:
        raise tc.DecodeError(f"metadata.{name}: expected a positive integer, got {v!r}")
    return v
