"""The JPEG sink's logic, without dora: check each JPEG and write the first few to files a
newcomer can open."""

from __future__ import annotations

import logging
import os
import re
import zlib
from pathlib import Path

import tensor_codec as tc

from ..common import protocol as P
from ..common.jpeg_header import JpegError, read_header

log = logging.getLogger("jpeg-sink")

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class JpegSink:
    def __init__(self, directory: str | Path, count: int, prefix: str = "frame"):
        self.directory = Path(directory)
        self.count = count
        self.prefix = _SAFE.sub("_", prefix) or "frame"
        self.received = self.saved = self.bad = 0
        self.paths: list[Path] = []

    def handle(self, event: dict) -> Path | None:
        """Check one JPEG message; save it if fewer than COUNT are saved. -> the file written."""
        self.received += 1
        metadata = event.get("metadata") or {}
        try:
            if metadata.get(P.ENCODING, "jpeg") != "jpeg":
                raise JpegError(f"metadata.encoding: expected 'jpeg', got {metadata.get(P.ENCODING)!r}")
            data = tc.plain_bytes(event.get("value"))
            read_header(data)
            crc = metadata.get(P.JPEG_CRC32)
            if crc is not None and crc != zlib.crc32(data.numpy()):
                raise JpegError(f"jpeg bytes: expected crc32 {crc} ({P.JPEG_CRC32}), got {zlib.crc32(data.numpy())}")
        except (JpegError, tc.CodecError) as e:
            self.bad += 1
            log.error("bad JPEG skipped (frame %s): %s", metadata.get(P.FRAME, "?"), e)
            return None
        if self.count and self.saved >= self.count:
            return None
        index = metadata.get(P.FRAME, metadata.get(P.SEQ, self.received - 1))
        name = f"{self.prefix}-{index:06d}.jpg" if type(index) is int and index >= 0 else f"{self.prefix}-{self.received - 1:06d}.jpg"
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / name
        tmp = path.with_suffix(".jpg.part")
        tmp.write_bytes(data.numpy().tobytes())
        os.replace(tmp, path)  # a viewer never opens a half-written file
        self.saved += 1
        self.paths.append(path)
        return path

    def summary(self) -> str:
        where = f" to {self.directory}" if self.saved else ""
        return f"received {self.received}, saved {self.saved}{where}, bad {self.bad}"
