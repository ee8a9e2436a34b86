"""The camera's per-frame logic, without dora: read a frame, describe it."""

from __future__ import annotations

from typing import Any

from torchvision import tv_tensors

from ..common import protocol as P
from ..common.pattern import PATTERN_NAME
from .config import CameraConfig
from .sources import FrameSource

ENCODINGS = {1: "mono8", 3: "rgb8"}


class Camera:
    """Numbers frames and builds each message's object and metadata.

    `next_frame()` -> (object to send, metadata) or None when the stream is over (FRAMES reached
    or the source ran out). In FORMAT=codec the object is a tv_tensors.Image (C, H, W); in
    FORMAT=raw it is an (H, W, C) view for `tc.send_plain`.
    """

    def __init__(self, config: CameraConfig, source: FrameSource, stream: str | None = None):
        self.config = config
        self.source = source
        self.stream = stream or P.new_stream_id()
        self.index = 0
        self.sent = 0
        self.failed = 0  # frames that could not be read or sent (counted, skipped)
        self.failures_in_a_row = 0

    @property
    def finished(self) -> bool:
        return bool(self.config.frames) and self.index >= self.config.frames

    def next_frame(self) -> tuple[Any, dict] | None:
        if self.finished:
            return None
        capture_ns = P.now_ns()
        frame = self.source.read(self.index)
        if frame is None:
            return None
        channels, height, width = frame.shape
        metadata = {
            P.SEQ: self.index,
            P.COUNT: self.config.frames,
            P.STREAM: self.stream,
            P.FRAME: self.index,
            P.CAPTURE_NS: capture_ns,
        }
        if self.source.pattern:
            metadata[P.PATTERN] = PATTERN_NAME
            metadata[P.PATTERN_SIZE] = f"{width}x{height}"
        self.index += 1
        if self.config.format == "raw":
            # dora's image convention: the value is exactly these interleaved bytes
            metadata.update(P.image_keys(ENCODINGS[channels], width, height))
            return frame.permute(1, 2, 0), metadata
        # A tensor_codec message: never dora's image keys (see protocol.IMAGE_KEYS)
        metadata[P.PIXEL_FORMAT] = ENCODINGS[channels]
        return tv_tensors.Image(frame), metadata
