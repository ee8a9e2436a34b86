"""The receiver's per-message logic, without dora: restore, verify, count, time."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import torch

import tensor_codec as tc

from ..common import protocol as P
from ..common.delivery import MAX_STREAM_CHARS, ack_for  # noqa: F401  (ack_for: the receiver's acks, one rule)
from ..common.device import synchronize
from ..common.hostile import BoundedStreams, Refusals, shown
from ..common.images import is_plain_image, restore_plain_image
from ..common.stats import Latencies, SeqTracker, keep_failure
from .verify import DEFAULT_MAX_BYTES, LossyBounds, Mismatch, verify

log = logging.getLogger("tensor-receiver")

_DEFAULT_LOSSY = LossyBounds()  # frozen: one instance serves every receiver

MAX_REASONS = 8  # distinct reasons for unverified messages kept per input
COMPRESSED = frozenset(
    {"jpeg", "jpg", "jpe", "png", "webp", "bmp", "avif"}
)  # dora image encodings of files, not pixels

# What a report figure may be made of: metadata outside these ranges makes a bad message, never a
# statistic (one message with seq 2**63 - 1 once reported "missing 9223372036854775807").
MAX_SEQ = 2**53  # an open-ended stream's seq: a million messages a second for 285 years
MAX_COUNT = P.MAX_COUNT  # a finite stream's count (protocol.py says why)
MAX_SEQ_GAP = 1 << 20  # an open-ended stream's seq: at most this far past the highest seen (not its first)
MAX_AGE_NS = 3600 * 10**9  # sent_ns / capture_ns: at most an hour before this machine's clock...
# ... and at most a minute after it: another machine's clock may run ahead (NTP keeps it within
# milliseconds; a machine without it drifts seconds a day).
MAX_AHEAD_NS = 60 * 10**9


@dataclass
class StreamState:
    """What a receiver keeps of one sender's stream."""

    tracker: SeqTracker = field(default_factory=SeqTracker)
    count: int | None = None  # the total its first message announced (0 = open-ended)


def _int_in(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def numbering_problem(metadata: dict) -> str | None:
    """Why a message's numbering (seq, count, stream) cannot be counted (field, expected, got),
    or None. Absent keys are fine: a plain dora node's messages carry none."""
    seq, count = metadata.get(P.SEQ), metadata.get(P.COUNT)
    if seq is not None and not _int_in(seq, 0, MAX_SEQ):
        return f"metadata.{P.SEQ}: expected an integer from 0 to 2**53, got {shown(seq)}"
    if count is not None and not _int_in(count, 0, MAX_COUNT):
        return (
            f"metadata.{P.COUNT}: expected an integer from 0 (open-ended) to 2**32 (a finite stream's length), "
            f"got {shown(count)}"
        )
    stream = metadata.get(P.STREAM, "")
    if not isinstance(stream, str) or len(stream) > MAX_STREAM_CHARS:
        return f"metadata.{P.STREAM}: expected a string of at most {MAX_STREAM_CHARS} characters, got {shown(stream)}"
    return None


def timing_problem(metadata: dict, arrival_ns: int) -> str | None:
    """Why a message's `sent_ns` or `capture_ns` cannot make a latency (field, expected, got),
    or None."""
    for key in (P.SENT_NS, P.CAPTURE_NS):
        value = metadata.get(key)
        if value is not None and not _int_in(value, arrival_ns - MAX_AGE_NS, arrival_ns + MAX_AHEAD_NS):
            return (
                f"metadata.{key}: expected nanoseconds since the epoch within an hour before and a minute after "
                f"this machine's clock ({arrival_ns}), got {shown(value)}"
            )
    return None


def sequence_problem(state: StreamState | None, seq: int, count: int | None) -> str | None:
    """Why `seq` (and `count`) cannot belong to the stream whose state is `state` (None: its
    first message, which seeds an open-ended stream wherever it starts: a receiver started late,
    or one that forgot the stream, picks it up there), or None."""
    if state is not None and state.count is not None and count is not None and count != state.count:
        return f"metadata.{P.COUNT}: expected {state.count}, as this stream's earlier messages said, got {count}"
    total = count if count is not None else (state.count if state is not None else None)
    if total:
        if seq >= total:
            return f"metadata.{P.SEQ}: expected below the stream's count {total}, got {seq}"
        return None
    if state is None:
        return None
    highest = state.tracker.max_seen
    if seq > highest + MAX_SEQ_GAP:
        return (
            f"metadata.{P.SEQ}: expected at most {highest + MAX_SEQ_GAP} on an open-ended stream (2**20 past the "
            f"highest seen, {highest}), got {seq}"
        )
    return None


@dataclass
class InputStats:
    received: int = 0
    good: int = 0  # decoded and verified (checksum, or a synthetic frame's pixels)
    unverified: int = 0  # decoded, but nothing could prove the content right (see `why_unverified`)
    bad: int = 0
    rejected: int = 0  # deliberately corrupted messages, refused as they must be
    duplicates: int = 0
    out_of_order: int = 0
    # Per stream, the least recently used forgotten past hostile.MAX_STREAMS (counted in the report).
    streams: BoundedStreams[StreamState] = field(default_factory=lambda: BoundedStreams(StreamState))
    latency: Latencies = field(default_factory=Latencies)  # from the last hop's sent_ns
    age: Latencies = field(default_factory=Latencies)  # from capture_ns: through every node on the way
    first_ns: int | None = None
    last_ns: int | None = None
    failures: list[str] = field(default_factory=list)
    transports: dict[str, int] = field(default_factory=dict)  # the transport of each decoded message
    why_unverified: dict[str, int] = field(default_factory=dict)  # reason -> messages (first few reasons)

    @property
    def missing(self) -> int:
        return sum(s.tracker.missing(s.count or 0) for s in self.streams.values())

    @property
    def expected(self) -> int | None:
        counts = [s.count for s in self.streams.values()]
        if not counts or not all(counts):
            return None
        return sum(counts)  # type: ignore[arg-type]

    @property
    def fps(self) -> float | None:
        if self.received < 2 or self.first_ns is None or self.last_ns == self.first_ns:
            return None
        return (self.received - 1) / ((self.last_ns - self.first_ns) / 1e9)

    def to_dict(self) -> dict:
        return {
            "received": self.received,
            "good": self.good,
            "unverified": self.unverified,
            "bad": self.bad,
            "rejected": self.rejected,
            "missing": self.missing,
            "out_of_order": self.out_of_order,
            "duplicates": self.duplicates,
            "expected": self.expected,
            "fps": self.fps,
            "latency_ms": self.latency.summary(),
            "age_ms": self.age.summary(),
            "failures": list(self.failures),
            "unverified_because": dict(self.why_unverified),
            "transports": dict(self.transports),
            "streams_forgotten": self.streams.forgotten,
        }


class Receiver:
    """`inputs`: the input ids the dataflow wires to this node; one that never delivers a
    message makes the run fail (a source that silently sent nothing is not a pass)."""

    def __init__(
        self,
        device: torch.device,
        verify_mode: str = "full",
        clock_ns=time.time_ns,
        inputs=(),
        lossy: LossyBounds = _DEFAULT_LOSSY,
        verify_max_bytes: int = DEFAULT_MAX_BYTES,
        refusals: Refusals | None = None,
    ):
        self.device = device
        self.verify_mode = verify_mode
        self.lossy = lossy
        self.verify_max_bytes = verify_max_bytes
        self.refusals = refusals if refusals is not None else Refusals(log)  # bad messages, logged rate-limited
        self.clock_ns = clock_ns
        self.inputs: dict[str, InputStats] = {name: InputStats() for name in sorted(inputs)}

    def handle(self, event: dict) -> str:
        """One INPUT event -> 'good', 'unverified', 'bad', 'rejected' or 'duplicate'. Never raises."""
        name = str(event.get("id"))
        metadata = event.get("metadata") or {}
        stats = self.inputs.setdefault(name, InputStats())
        arrival = self.clock_ns()
        seq, count, stream = metadata.get(P.SEQ), metadata.get(P.COUNT), metadata.get(P.STREAM, "")
        # Numbering out of range: bad, and not counted against the stream. Timing out of range:
        # bad, but its (valid) seq is counted, so the message is not also missing.
        problem = numbering_problem(metadata)
        if problem is None and seq is not None:
            problem = sequence_problem(stats.streams.get(stream), seq, count)
        if problem is None and seq is not None:
            state = stats.streams.state(stream)
            seen = state.tracker.see(seq)
            if seen == "duplicate":
                stats.duplicates += 1
                return "duplicate"
            stats.out_of_order += seen == "late"
            if state.count is None and count is not None:
                state.count = count
        if problem is None:
            problem = timing_problem(metadata, arrival)
        stats.received += 1
        if stats.first_ns is None:
            stats.first_ns = arrival
        stats.last_ns = arrival
        if problem is not None:
            return self._bad(name, stats, metadata, problem)
        rejecting = P.to_be_refused(metadata)
        try:
            with tc.scope():
                obj = self._restore(event, metadata)
                synchronize(self.device)
                sent = metadata.get(P.SENT_NS)
                captured = metadata.get(P.CAPTURE_NS)
                if type(sent) is int or type(captured) is int:
                    now = self.clock_ns()
                    if type(sent) is int:
                        stats.latency.add((now - sent) / 1e6)
                    if type(captured) is int:
                        stats.age.add((now - captured) / 1e6)
                if rejecting:
                    return self._bad(name, stats, metadata, "a deliberately corrupted message was accepted")
                why_not = verify(obj, metadata, self.verify_mode, self.lossy, self.verify_max_bytes)
                del obj
                # Which path the bytes took (host, cuda-ipc; "plain" for flat frames without codec
                # keys): what routing chose for this input, visible in the report. The header was
                # validated and cached by the decode above: one lookup.
                transport = tc.message_transport(metadata) if tc.is_codec_message(metadata) else "plain"
        except tc.CodecError as e:
            if rejecting:
                stats.rejected += 1
                # the summary's `rejected` column counts these; a passing run does not list them
                log.debug("%s: refused corrupted message %s as expected: %s", name, metadata.get(P.CASE), e)
                return "rejected"
            return self._bad(name, stats, metadata, f"{type(e).__name__}: {e}")
        except Mismatch as e:
            return self._bad(name, stats, metadata, str(e))
        except Exception as e:  # never die on one message
            return self._bad(name, stats, metadata, f"unexpected {type(e).__name__}: {e}")
        if why_not is None:
            stats.good += 1
            verdict = "good"
        else:
            stats.unverified += 1
            verdict = "unverified"
            if why_not in stats.why_unverified or len(stats.why_unverified) < MAX_REASONS:
                stats.why_unverified[why_not] = stats.why_unverified.get(why_not, 0) + 1
        stats.transports[transport] = stats.transports.get(transport, 0) + 1
        return verdict

    def _restore(self, event: dict, metadata: dict) -> Any:
        encoding = metadata.get(P.ENCODING)
        if isinstance(encoding, str) and encoding in COMPRESSED:
            raise tc.DecodeError(
                "metadata.encoding: expected a tensor_codec message or raw frame bytes (rgb8, bgr8, mono8), got "
                f"{encoding!r:.20}, a compressed image: wire this input through tc-jpeg-decoder (its `jpeg` input) "
                "and this one to its `image` output"
            )
        if is_plain_image(metadata):
            image = restore_plain_image(event.get("value"), metadata)
            return image if self.device.type == "cpu" else tc.map_tensors(lambda p, o: p.to(self.device), image)
        return tc.receive(event, device=None if self.device.type == "cpu" else self.device)

    def _bad(self, name: str, stats: InputStats, metadata: dict, reason: str) -> str:
        stats.bad += 1
        what = f"seq {metadata.get(P.SEQ)} ({metadata.get(P.CASE) or metadata.get(P.FRAME, '?')}): {reason}"
        keep_failure(stats.failures, what)
        self.refusals.refuse(f"{name[:64]}: bad message", what)
        return "bad"

    # -- reports -----------------------------------------------------------------------------

    @property
    def ok(self) -> bool:
        if not self.inputs:
            return False
        return all(s.received and s.bad == 0 and s.missing == 0 for s in self.inputs.values())

    def report(self) -> dict:
        return {
            "ok": self.ok,
            "device": str(self.device),
            "verify": self.verify_mode,
            "inputs": {k: v.to_dict() for k, v in self.inputs.items()},
        }
