"""The rerun sink's logic, without dora: what each message is, shown under its input's entity
path at its capture time, and counted."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np

import tensor_codec as tc
from tensor_codec.errors import some_keys

from ..common import protocol as P
from ..common.images import CHANNELS
from ..common.jpeg_header import JpegError, check_jpeg_message
from .views import CannotShow, View, entity_path, jpeg_view, plain_image_view, views

log = logging.getLogger("rerun-sink")

CAPTURE_TIMELINE = "capture_time"  # the message's capture_ns, where it has one
_MAX_LOGGED = 20  # problems logged per input; the rest only counted
_JPEG_SOI = b"\xff\xd8\xff"
_INT64 = 1 << 63
_MAX_SPLIT_PARTS, _MAX_SPLIT_CHARS = 8, 200  # a SPLIT_BY value from the network makes at most this much path


def message_kind(metadata: dict, value: Any) -> str:
    """ "tensor_codec", "jpeg", "image" (a dora plain image), or "unknown"."""
    if tc.is_codec_message(metadata):
        return "tensor_codec"
    encoding = metadata.get(P.ENCODING)
    if encoding == "jpeg":
        return "jpeg"
    if encoding is not None:
        return "image"
    if _starts_like_jpeg(value):
        return "jpeg"  # bare JPEG bytes, e.g. a file sent as it is
    return "unknown"


def _starts_like_jpeg(value: Any) -> bool:
    try:
        return len(value) >= 3 and bytes(value[:3].to_numpy(zero_copy_only=False)) == _JPEG_SOI
    except Exception:  # not an Arrow array of bytes
        return False


def message_views(value: Any, metadata: dict) -> tuple[list[View], list[str]]:
    """What one message shows as -> (views, problems); raises tc.CodecError, JpegError or
    CannotShow when nothing of it can be shown."""
    kind = message_kind(metadata, value)
    if kind == "tensor_codec":
        obj = tc.decode(value, metadata)
        return views(obj, metadata.get(P.PIXEL_FORMAT))
    if kind == "jpeg":
        data = tc.plain_bytes(value)
        check_jpeg_message(data, metadata)
        return [jpeg_view(data)], []
    if kind == "image":
        encoding, width, height = metadata.get(P.ENCODING), metadata.get(P.WIDTH), metadata.get(P.HEIGHT)
        if encoding not in CHANNELS:
            raise CannotShow(f"metadata.encoding: expected one of jpeg, {', '.join(CHANNELS)}, got {encoding!r:.60}")
        for key, v in ((P.WIDTH, width), (P.HEIGHT, height)):
            if type(v) is not int or v <= 0:
                raise CannotShow(f"metadata.{key}: expected a positive integer, got {v!r:.60}")
        flat = tc.plain_bytes(value)
        expected = width * height * CHANNELS[encoding]
        if flat.numel() != expected:
            raise CannotShow(
                f"value: expected {width}x{height}x{CHANNELS[encoding]} = {expected} bytes for {encoding}, got "
                f"{flat.numel()}"
            )
        return [plain_image_view(flat, encoding, width, height)], []
    raise CannotShow(
        "metadata: expected a tensor_codec message (tc.header), a dora image (encoding: rgb8, bgr8, mono8 or jpeg) "
        f"or JPEG bytes, got keys {some_keys(metadata)}"
    )


def capture_time(metadata: dict) -> np.datetime64 | None:
    """The message's capture_ns as a timestamp; None when absent. A value that is not a
    nanosecond count raises CannotShow (the message is still shown, at its log time)."""
    ns = metadata.get(P.CAPTURE_NS)
    if ns is None:
        return None
    if type(ns) is not int or not 0 <= ns < _INT64:
        raise CannotShow(
            f"metadata.{P.CAPTURE_NS}: expected nanoseconds since the epoch (an integer >= 0), got {ns!r:.60}"
        )
    return np.datetime64(ns, "ns")


class RerunSink:
    """Logs each message it is handed to `recording`, under /<input id>/<path in the message>;
    counts what came, what was shown and what was not (and why: logged, the first few)."""

    def __init__(self, recording: Any, split_by: str | None = "case"):
        self.recording = recording
        self.split_by = split_by
        self.received: Counter[str] = Counter()
        self.shown: Counter[str] = Counter()
        self.bad: Counter[str] = Counter()  # messages not shown at all
        # Not shown, as their sender said they must not be (metadata expect=reject: the suite's
        # deliberately corrupted messages): counted apart, never logged as errors.
        self.refused: Counter[str] = Counter()
        self.partial: Counter[str] = Counter()  # messages with a leaf not shown (the rest was)
        self.entities: set[str] = set()

    def handle(self, input_id: str, value: Any, metadata: dict) -> bool:
        """Show one message; -> True when all of it was shown. Never raises for bad input."""
        self.received[input_id] += 1
        try:
            with tc.scope():  # the message's views go back to dora once rerun has its copy
                found, problems = message_views(value, metadata)
                self._log(input_id, metadata, found, problems)
        except (tc.CodecError, JpegError, CannotShow) as e:
            if P.to_be_refused(metadata):
                self.refused[input_id] += 1
                log.debug("input %s, message %s: refused as its sender expected: %s", input_id, P.label(metadata), e)
                return False
            return self._problem(self.bad, input_id, metadata, f"not shown: {e}")
        except Exception as e:  # a case the checks above missed: still one bad message, not a dead node
            return self._problem(self.bad, input_id, metadata, f"not shown ({type(e).__name__}): {str(e)[:300]}")
        if problems:
            return self._problem(self.partial, input_id, metadata, "partly shown: " + "; ".join(problems)[:500])
        self.shown[input_id] += 1
        return True

    def _log(self, input_id: str, metadata: dict, found: list[View], problems: list[str]) -> None:
        rec = self.recording
        rec.reset_time()  # no time of the previous message carries over
        try:
            when = capture_time(metadata)
        except CannotShow as e:
            problems.append(str(e))
            when = None
        if when is not None:
            rec.set_time(CAPTURE_TIMELINE, timestamp=when)
        for key in (P.FRAME, P.SEQ):
            if type(metadata.get(key)) is int and 0 <= metadata[key] < _INT64:
                rec.set_time(key, sequence=metadata[key])
        prefix = self._split(input_id, metadata, problems)
        for view in found:
            path = entity_path(input_id, prefix + view.parts)
            if view.timeline is not None:
                rec.set_time(view.timeline[0], sequence=view.timeline[1])
            rec.log(path, view.archetype)
            if view.timeline is not None:
                rec.disable_timeline(view.timeline[0])  # the next leaf is not a video frame
            self.entities.add(path)

    def _split(self, input_id: str, metadata: dict, problems: list[str]) -> tuple[str, ...]:
        """The entity path levels the message's SPLIT_BY value makes ("suite/tv/mask" -> three)."""
        if self.split_by is None or self.split_by not in metadata:
            return ()
        value = metadata[self.split_by]
        if type(value) is not str or not 0 < len(value) <= _MAX_SPLIT_CHARS:
            problems.append(
                f"metadata.{self.split_by} (SPLIT_BY): expected a name of 1 to {_MAX_SPLIT_CHARS} characters, got "
                f"{value!r:.60}"
            )
            return ()
        parts = tuple(part for part in value.split("/") if part)
        if len(parts) > 1 and parts[0] == input_id:
            parts = parts[1:]  # "suite/dtype/x" on input `suite`: /suite/dtype/x, not /suite/suite/dtype/x
        return (
            parts[: _MAX_SPLIT_PARTS - 1] + ("/".join(parts[_MAX_SPLIT_PARTS - 1 :]),)
            if len(parts) > _MAX_SPLIT_PARTS
            else parts
        )

    def _problem(self, counter: Counter, input_id: str, metadata: dict, what: str) -> bool:
        counter[input_id] += 1
        if self.bad[input_id] + self.partial[input_id] <= _MAX_LOGGED:
            log.error("input %s, message %s: %s", input_id, P.label(metadata), what)
        return False

    def summary(self) -> str:
        parts = []
        for input_id in sorted(self.received):
            line = f"{input_id}: {self.received[input_id]} received, {self.shown[input_id]} shown"
            if self.partial[input_id]:
                line += f", {self.partial[input_id]} partly"
            if self.refused[input_id]:
                line += f", {self.refused[input_id]} refused as expected"
            if self.bad[input_id]:
                line += f", {self.bad[input_id]} bad"
            parts.append(line)
        return "; ".join(parts) or "nothing received"

    def close(self, timeout_s: float = 10.0) -> str | None:
        """Everything logged reaches the file (with its footer) and the viewer; -> None, or why
        not (a viewer that cannot be reached: rerun gives up after a few seconds, never a hang)."""
        try:
            self.recording.flush(timeout_sec=timeout_s)
        except RuntimeError as e:  # rerun's words, e.g. "gRPC has been unable to connect for 6s, uri: ..."
            return str(e)[:300]
        finally:
            self.recording.disconnect()
        return None
