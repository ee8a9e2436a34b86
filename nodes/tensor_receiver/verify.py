"""Checks a received object against what its metadata promises. Raises `Mismatch` with the
field, what was expected and what came."""

from __future__ import annotations

from typing import Any

import torch
from torchvision import tv_tensors

import tensor_codec as tc

from ..common import protocol as P
from ..common.digest import content_digest
from ..common.pattern import PATTERN_NAME, read_index, render, same_pixels

CHANNELS = {"rgb8": 3, "bgr8": 3, "mono8": 1}


class Mismatch(Exception):
    """The message decoded, but is not what its sender said it sent."""


def restore_plain_image(value: Any, metadata: dict) -> tv_tensors.Image:
    """A dora image message (flat rgb8 / bgr8 / mono8 bytes, `width`, `height`) as a (C, H, W)
    tv_tensors.Image viewing the message (read it before the event is dropped)."""
    encoding = metadata.get(P.ENCODING)
    if encoding not in CHANNELS:
        raise tc.DecodeError(f"metadata.encoding: expected one of {', '.join(CHANNELS)}, got {encoding!r}")
    width, height = metadata.get(P.WIDTH), metadata.get(P.HEIGHT)
    for name, v in ((P.WIDTH, width), (P.HEIGHT, height)):
        if type(v) is not int or v <= 0:
            raise tc.DecodeError(f"metadata.{name}: expected a positive integer, got {v!r}")
    channels = CHANNELS[encoding]
    flat = tc.plain_bytes(value)
    if flat.numel() != width * height * channels:
        raise tc.DecodeError(f"value: expected {width}x{height}x{channels} = {width * height * channels} bytes for {encoding}, got {flat.numel()}")
    chw = flat.view(height, width, channels).permute(2, 0, 1)
    if encoding == "bgr8":
        chw = chw.flip(0)
    return tv_tensors.Image(chw)


def verify(obj: Any, metadata: dict, mode: str) -> bool:
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
        verify_frame(obj, metadata, mode)
        checked = True
    return checked


def verify_frame(obj: Any, metadata: dict, mode: str) -> None:
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
    if mode == "full":
        plain = obj.as_subclass(torch.Tensor)
        interleaved = channels > 1 and plain.stride(0) == 1  # rgb8 bytes: build the reference alike
        reference = render(index, want[1], want[2], channels=channels, device=obj.device, hwc=interleaved)
        if not same_pixels(plain, reference):
            differing = int((plain != reference).sum())
            raise Mismatch(f"pixels: expected synthetic frame {frame} exactly, got {differing} of {plain.numel()} values different")
