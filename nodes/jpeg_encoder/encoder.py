"""The JPEG encoder's per-message logic, without dora: restore and check frames, batch them,
keep the engine's workers busy, and hand back JPEGs in input order."""

from __future__ import annotations

import logging
import time
from collections import deque
from concurrent.futures import wait
from dataclasses import dataclass, field
from typing import Any

import torch

import tensor_codec as tc

from ..common import protocol as P
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
    frame: torch.Tensor
    metadata: dict
    borrowed: Any  # the received object, released once encoded (it may view dora's memory)


@dataclass
class _Job:
    items: list[_Item]
    future: Any


class JpegEncoder:
    """Frames in, JPEGs out in input order, the engine's workers kept busy.

    How batches are formed (issue 34): the main thread that calls accept, dispatch and collect is
    also the one that receives every frame, so nothing a worker needs may wait for it.
      * A worker with nothing to do gets whatever is pending, up to BATCH frames, at once: a frame
        is never held back to fill a batch while a worker idles (latency).
      * While every worker is busy, each full batch is queued behind them (at most one per
        worker): a worker that finishes starts the next batch itself, without waiting for this
        thread to come back from receiving, and under load every batch is full.
      * collect hands out new work as soon as it finds a finished batch, before its bookkeeping.
    Frames held (pending, queued and being encoded) stay under 2 x BATCH x WORKERS, the bound
    `can_accept` keeps; past it, frames wait in dora's input queue instead of this node's memory."""

    def __init__(
        self, engine: JpegEngine, quality: int, batch: int, clock_ns=time.time_ns, refusals: Refusals | None = None
    ):
        self.engine = engine
        self.refusals = refusals if refusals is not None else Refusals(log)  # the node's: logged paced, summarised
        self.quality = quality
        self.batch = batch
        self.clock_ns = clock_ns
        self.stats = EncoderStats()
        self.pending: deque[_Item] = deque()
        self.inflight: deque[_Job] = deque()
        self.held = 0  # frames accepted and not yet collected: pending + in the inflight jobs
        self.limit = 2 * batch * engine.workers

    # -- input -----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.inflight)

    @property
    def can_accept(self) -> bool:
        """False while the frames held reach 2 x BATCH x WORKERS: a round of batches being encoded
        and one waiting; then dora's input queue holds (and, at its queue_size, drops the oldest
        of) further frames instead of this node's memory."""
        return self.held < self.limit

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
        self.pending.append(_Item(frame, jpeg_metadata(metadata, channels, height, width, self.quality), obj))
        self.held += 1
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

    def dispatch(self) -> None:
        """Hand pending frames to the engine as the class docstring says: up to BATCH to a worker
        with nothing to do, full batches queued behind busy ones (one per worker)."""
        workers = self.engine.workers
        while self.pending:
            started = sum(1 for job in self.inflight if not job.future.done())  # running or queued
            if started < workers:
                take = min(self.batch, len(self.pending))
            elif started < 2 * workers and len(self.pending) >= self.batch:
                take = self.batch
            else:
                return
            items = [self.pending.popleft() for _ in range(take)]
            try:
                future = self.engine.submit([i.frame for i in items])
            except Exception as e:
                self.held -= len(items)
                self._failed(items, f"{type(e).__name__}: {e}")
                continue
            for i in items:
                i.frame = None  # the engine holds what it needs
            self.inflight.append(_Job(items, future))

    def collect(self, timeout: float = 0.0) -> list[tuple[torch.Tensor, dict]]:
        """Finished JPEGs in input order as (flat uint8 CPU tensor, metadata); waits up to
        `timeout` seconds for the oldest batch if nothing is finished."""
        done: list[_Job] = []
        while self.inflight:
            job = self.inflight[0]
            if not job.future.done():
                if timeout <= 0 or done:
                    break
                wait([job.future], timeout)
                timeout = 0
                continue
            done.append(self.inflight.popleft())
        if not done:
            return []
        self.dispatch()  # the workers those batches freed get new work before the bookkeeping below
        out = []
        for job in done:
            self.held -= len(job.items)
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
