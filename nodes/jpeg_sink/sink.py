"""The JPEG sink's logic, without dora: check each JPEG and write the first few to files a
newcomer can open."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import tensor_codec as tc

from ..common import protocol as P
from ..common.hostile import Refusals
from ..common.jpeg_header import JpegError, check_jpeg_message
from .config import INPUT

log = logging.getLogger("jpeg-sink")

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class JpegSink:
    def __init__(self, directory: str | Path, count: int, prefix: str = "frame", refusals: Refusals | None = None):
        self.refusals = refusals if refusals is not None else Refusals(log)  # the node's: logged paced, summarised
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
            data = tc.plain_bytes(event.get("value"))
            check_jpeg_message(data, metadata)
        except (JpegError, tc.CodecError) as e:
            self.bad += 1
            self.refusals.refuse(f"{INPUT}: bad JPEG", f"frame {P.label(metadata)[:40]}: {e}")
            return None
        if self.count and self.saved >= self.count:
            return None
        index = metadata.get(P.FRAME, metadata.get(P.SEQ, self.received - 1))
        name = (
            f"{self.prefix}-{index:06d}.jpg"
            if type(index) is int and index >= 0
            else f"{self.prefix}-{self.received - 1:06d}.jpg"
        )
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
