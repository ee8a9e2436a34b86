"""Counting sequence numbers and summarising latencies, for receivers."""

from __future__ import annotations

import math

__all__ = ["SeqTracker", "Latencies", "keep_failure", "MAX_FAILURES_KEPT"]

MAX_FAILURES_KEPT = 20  # per report: enough to diagnose, bounded on endless streams


def keep_failure(failures: list[str], what: str) -> None:
    """Remember one failure for a report (the first MAX_FAILURES_KEPT, 500 characters each)."""
    if len(failures) < MAX_FAILURES_KEPT:
        failures.append(what[:500])


class SeqTracker:
    """Sees each message's seq once: new, late (after a higher one) or duplicate.

    Memory stays bounded on endless streams: everything below a watermark has been seen; seqs
    above it are kept in a set, and a gap older than `horizon` messages is given up (a message
    that still arrives after that counts as a duplicate).

    An open-ended stream (count 0) has no start a receiver knows: it is counted from the lowest seq
    seen (a receiver started late, or one that forgot the stream, picks it up where it is; one
    message with seq 2**53 on a fresh stream once reported "missing 9007199254740992").
    """

    def __init__(self, horizon: int = 4096):
        self.horizon = horizon
        self.low = 0
        self.above: set[int] = set()
        self.max_seen = -1
        self.min_seen: int | None = None
        self.distinct = 0

    def see(self, seq: int) -> str:
        if seq < self.low or seq in self.above:
            return "duplicate"
        late = seq < self.max_seen
        self.above.add(seq)
        self.distinct += 1
        self.max_seen = max(self.max_seen, seq)
        self.min_seen = seq if self.min_seen is None else min(self.min_seen, seq)
        self._advance()
        if len(self.above) > self.horizon:
            self.low = min(self.above)
            self._advance()
        return "late" if late else "new"

    def _advance(self) -> None:
        while self.low in self.above:
            self.above.remove(self.low)
            self.low += 1

    def missing(self, count: int) -> int:
        """Messages never seen, of `count` announced (0 = open-ended: from the lowest seen to the highest)."""
        if count:
            return max(0, count - self.distinct)
        if self.min_seen is None:
            return 0
        return self.max_seen + 1 - self.min_seen - self.distinct


class Latencies:
    """Milliseconds, summarised by percentiles; keeps at most `limit` samples (every other one
    is dropped when full, so long runs stay representative)."""

    def __init__(self, limit: int = 100_000):
        self.limit = limit
        self.samples: list[float] = []
        self.stride = 1
        self.seen = 0

    def add(self, ms: float) -> None:
        self.seen += 1
        if self.seen % self.stride:
            return
        self.samples.append(ms)
        if len(self.samples) >= self.limit:
            self.samples = self.samples[::2]
            self.stride *= 2

    def percentile(self, q: float) -> float | None:
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        rank = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
        return ordered[rank]

    def summary(self) -> dict:
        if not self.samples:
            return {"p50": None, "p99": None, "max": None, "mean": None}
        return {
            "p50": self.percentile(50),
            "p99": self.percentile(99),
            "max": max(self.samples),
            "mean": sum(self.samples) / len(self.samples),
        }
