"""The JPEG encoder's per-message logic, without dora: restore and check frames, batch them,
keep the engine's workers busy, and hand back JPEGs in input order."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import torch

import tensor_codec as tc

from ..common import protocol as P
from ..common.batching import BatchedWork, OrderedBatches
from ..common.hostile import Refusals
from ..common.images import FrameError, check_frame, is_plain_image, restore_plain_image
from ..common.stats import keep_failure
from .config import INPUT
from .engines import JpegEngine

log = logging.getLogger("jpeg-encoder")

# Keys that describe the source message, not the JPEG: dropped on the way through.
_NOT_CARRIED = frozenset(
    {P.CHECKSUM, P.WANTS_ACK, P.EXPECT, P.SENT_NS, *P.IMAGE_KEYS, P.PIXEL_FORMAT, P.JPEG_CRC32, P.LOSSY, P.SUBSAMPLING}
)


def jpeg_metadata(source: dict, channels: int, height: int, width: int, quality: int) -> dict:
    """What a JPEG message says: dora's image keys, plus everything the source frame carried
    (frame index, capture time, seq/stream) except tensor_codec's keys and content checks."""
    out = P.carried(source, _NOT_CARRIED)
    out.update({P.ENCODING: "jpeg", P.WIDTH: width, P.HEIGHT: height, P.CHANNELS: channels, P.QUALITY: quality})
    return out


@dataclass
class EncoderStats:
    received: int = 0
    encoded: int = 0
    bad: int = 0  # frames refused (not decodable, wrong type, dtype, shape or channels)
    failed: int = 0  # frames the encoder or the send failed on
    bytes_out: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    failures: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        keep_failure(self.failures, what)

    def summary(self) -> str:
        rate = ""
        if self.encoded > 1 and self.last_ns and self.first_ns and self.last_ns > self.first_ns:
            rate = f", {(self.encoded - 1) / ((self.last_ns - self.first_ns) / 1e9):.1f} frames/s"
        mean = f", {self.bytes_out / self.encoded / 1024:.1f} KiB each" if self.encoded else ""
        return f"received {self.received}, encoded {self.encoded}, bad {self.bad}, failed {self.failed}{mean}{rate}"


@dataclass
class _Item:
    frame: torch.Tensor | None  # handed to the engine at submit, then dropped here
    metadata: dict
    borrowed: Any  # the received object, released once encoded (it may view dora's memory)


class JpegEncoder(BatchedWork):
    """Frames in, JPEGs out in input order, the engine's workers kept busy: batches formed as
    ../common/batching.py says (the main thread that accepts frames also receives them, so no
    worker waits for it). Frames held stay under 2 x BATCH x WORKERS (`can_accept`)."""

    def __init__(
        self, engine: JpegEngine, quality: int, batch: int, clock_ns=time.time_ns, refusals: Refusals | None = None
    ):
        self.engine = engine
        self.refusals = refusals if refusals is not None else Refusals(log)  # the node's: logged paced, summarised
        self.quality = quality
        self.batch = batch
        self.clock_ns = clock_ns
        self.stats = EncoderStats()
        self.batches: OrderedBatches[_Item] = OrderedBatches(self._submit, batch, engine.workers)

    # -- input -----------------------------------------------------------------------------

    def accept(self, event: dict) -> bool:
        """Restore and check one frame message; a bad one is logged, counted and skipped."""
        self.stats.received += 1
        metadata = event.get("metadata") or {}
        device = self.engine.device
        obj = None
        try:
            if is_plain_image(metadata):
                obj = restore_plain_image(event.get("value"), metadata)
            else:
                obj = tc.receive(event, device=None if device.type == "cpu" else device)
            frame = check_frame(obj)
            if frame.device != device:
                frame = frame.to(device)
        except (tc.CodecError, FrameError) as e:
            self._release(obj)
            self._bad(metadata, f"{type(e).__name__}: {e}")
            return False
        except Exception as e:  # never die on one message
            self._release(obj)
            self._bad(metadata, f"unexpected {type(e).__name__}: {e}")
            return False
        channels, height, width = frame.shape
        self.batches.add(_Item(frame, jpeg_metadata(metadata, channels, height, width, self.quality), obj))
        return True

    def _bad(self, metadata: dict, reason: str) -> None:
        self.stats.bad += 1
        what = f"frame {P.label(metadata)}: {reason}"
        self.stats.note(what)
        self.refusals.refuse(f"{INPUT}: bad frame", what)

    @staticmethod
    def _release(obj: Any) -> None:
        if obj is not None:
            try:
                tc.release(obj)
            except tc.CodecError as e:  # a frame written in place while borrowed: say so, go on
                log.warning("%s", e)

    # -- work ------------------------------------------------------------------------------

    def _submit(self, items: list[_Item]):
        future = self.engine.submit([i.frame for i in items])
        for i in items:
            i.frame = None  # the engine holds what it needs
        return future

    def collect(self, timeout: float = 0.0) -> list[tuple[torch.Tensor, dict]]:
        """Finished JPEGs in input order as (flat uint8 CPU tensor, metadata); waits up to
        `timeout` seconds for the oldest batch if nothing is finished."""
        out = []
        for job in self.batches.done(timeout):
            try:
                encoded = job.future.result()
            except Exception as e:
                self._failed(job.items, f"encoder: {type(e).__name__}: {e}")
                continue
            finally:
                for item in job.items:
                    self._release(item.borrowed)
                    item.borrowed = None
            now = self.clock_ns()
            for item, jpeg in zip(job.items, encoded):
                if jpeg.problem is not None:
                    self._failed([item], f"encoder wrote no readable JPEG: {jpeg.problem}")
                    continue
                item.metadata[P.SUBSAMPLING] = jpeg.subsampling  # what was written, whatever the engine
                item.metadata[P.JPEG_CRC32] = jpeg.crc32
                self.stats.encoded += 1
                self.stats.bytes_out += jpeg.data.numel()
                if self.stats.first_ns is None:
                    self.stats.first_ns = now
                self.stats.last_ns = now
                out.append((jpeg.data, item.metadata))
        return out

    def _failed(self, items: list[_Item], reason: str) -> None:
        self.stats.failed += len(items)
        frames = ", ".join(P.label(i.metadata) for i in items)
        self.stats.note(f"frames {frames}: {reason}")
        log.error("encoding failed for frames %s: %s", frames, reason[:2000])

    def send_failed(self, metadata: dict, error: Exception) -> None:
        self.stats.encoded -= 1
        self.stats.failed += 1
        self.stats.note(f"frame {P.label(metadata)}: send: {type(error).__name__}: {error}")
        log.error("could not send the JPEG of frame %s: %s: %s", P.label(metadata), type(error).__name__, error)

    def close(self) -> None:
        self.engine.close()
