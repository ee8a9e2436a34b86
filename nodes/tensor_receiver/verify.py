"""Checks a received object against what its metadata promises. Raises `Mismatch` with the
field, what was expected and what came."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torchvision import tv_tensors

from tensor_codec.digest import content_digest, logical_bytes

from ..common import protocol as P
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


DEFAULT_MAX_BYTES = 1 << 30  # the receiver's VERIFY_MAX_BYTES

# What most often makes a node's own message fail here: it forwarded the metadata of the message
# it received (a frame's checksum, pixel_format and pattern) onto something else it made.
FORWARDED_HINT = (
    " (if the sender forwarded its input's metadata, those keys describe the input: tc.carry(metadata) drops "
    "them, tc.stamp(obj, metadata) adds this object's checksum)"
)


def frame_format(metadata: dict) -> str | None:
    """The pixel format a frame message declares: dora's `encoding` on flat image bytes, or
    `pixel_format` on a tensor_codec frame; None for messages that are not frames."""
    for key in (P.ENCODING, P.PIXEL_FORMAT):
        value = metadata.get(key)
        if isinstance(value, str) and value in CHANNELS:
            return value
    return None


def verify(
    obj: Any, metadata: dict, mode: str, lossy: LossyBounds = LossyBounds(), max_bytes: int = DEFAULT_MAX_BYTES
) -> str | None:
    """Raise Mismatch if `obj` is not what `metadata` promises; -> None when its content was
    verified, else why it could not be (it decoded, but nothing proves it is what was sent). A
    checksum costs the message's logical bytes: past `max_bytes` it is not computed (the cost of
    verifying must follow what travelled, not what a broadcast shape claims)."""
    if mode == "none":
        return "VERIFY=none"
    checked = False
    expected = metadata.get(P.CHECKSUM)
    if expected is not None:
        size = logical_bytes(obj)
        if size > max_bytes:
            return (
                f"checksum not computed: {size} logical bytes, more than VERIFY_MAX_BYTES={max_bytes} (broadcast "
                "repeats count)"
            )
        got = content_digest(obj)
        if got != expected:
            raise Mismatch(f"checksum: expected {expected!s:.60}, got {got}{FORWARDED_HINT}")
        checked = True
    pixel_format = frame_format(metadata)
    if pixel_format is not None:
        why_not = verify_frame(obj, metadata, pixel_format, mode, lossy)
        if why_not is not None and not checked:
            return why_not
        return None
    return None if checked else "nothing to check against (no checksum, no pixel format)"


def verify_frame(
    obj: Any, metadata: dict, pixel_format: str, mode: str, lossy: LossyBounds = LossyBounds()
) -> str | None:
    """Check a frame's type, dtype and shape against its metadata, and a synthetic frame's pixels;
    -> None when the content was verified, else why it could not be."""
    if not isinstance(obj, tv_tensors.Image):
        key = P.ENCODING if P.ENCODING in metadata else P.PIXEL_FORMAT
        raise Mismatch(
            f"type: expected torchvision.tv_tensors.Image, got {type(obj).__module__}.{type(obj).__qualname__}: "
            f"metadata {key}={pixel_format!r} says it is a frame{FORWARDED_HINT}"
        )
    channels = CHANNELS[pixel_format]
    if obj.dim() == 3 and P.ENCODING not in metadata:
        want = (channels, obj.shape[1], obj.shape[2])  # a tensor_codec frame: its size is its shape
    else:
        want = (channels, metadata.get(P.HEIGHT), metadata.get(P.WIDTH))
    if obj.dtype != torch.uint8 or tuple(obj.shape) != want:
        raise Mismatch(f"frame: expected uint8 of shape {want}, got {obj.dtype} of shape {tuple(obj.shape)}")
    if metadata.get(P.PATTERN) != PATTERN_NAME:
        return "no pattern or checksum: a real camera's frame, nothing known about its content"
    height, width = want[1], want[2]
    rendered = metadata.get(P.PATTERN_SIZE)
    if rendered is not None and rendered != f"{width}x{height}":
        return (
            f"frame is {width}x{height}, its pattern was rendered at {rendered!s:.32}: cropped or resized upstream? "
            "(VERIFY=none counts without checking)"
        )
    frame = metadata.get(P.FRAME)
    if type(frame) is not int or frame < 0:
        raise Mismatch(
            f"metadata.frame: expected the index a {PATTERN_NAME} frame carries (an integer >= 0), got {frame!r:.40}"
        )
    index = read_index(obj)
    if index is None or index != frame % 2**32:
        raise Mismatch(
            f"frame index in the pixels: expected {frame}, got {index if index is not None else 'unreadable'}"
        )
    if mode == "full" and metadata.get(P.LOSSY) is not None:
        reference = render(index, height, width, channels=channels, device=obj.device)
        db, mad = compare(obj.as_subclass(torch.Tensor), reference)
        if db < lossy.min_psnr or mad > lossy.max_mad:
            raise Mismatch(
                f"pixels after {metadata.get(P.LOSSY)}: expected PSNR >= {lossy.min_psnr:g} dB and mean abs diff <= "
                f"{lossy.max_mad:g} against synthetic frame {frame}, got {db:.2f} dB and {mad:.2f}"
            )
    elif mode == "full":
        plain = obj.as_subclass(torch.Tensor)
        interleaved = channels > 1 and plain.stride(0) == 1  # rgb8 bytes: build the reference alike
        reference = render(index, height, width, channels=channels, device=obj.device, hwc=interleaved)
        if not same_pixels(plain, reference):
            differing = int((plain != reference).sum())
            raise Mismatch(
                f"pixels: expected synthetic frame {frame} exactly, got {differing} of {plain.numel()} values different"
            )
    return None
