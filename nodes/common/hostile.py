"""Every input a node takes is hostile: what refuses one without stopping the node, and what
keeps per-sender state bounded whatever senders say.

`Refusals`: each refused input (a malformed ack, a message the node cannot handle, an exception
out of a node's own handling) is counted under a kind ("<input>: <what was wrong>") and logged,
rate-limited: a flood of bad messages must not turn into a flood of log lines, which would cost
more than the messages. The node loop owns one per node (`NodeLogic.refusals`) and logs its
summary when the node ends; a node's own counters (bad frames, bad messages) stay in its summary.

`BoundedStreams`: per-stream state (a sequence tracker per `stream` value a sender names) as a
least-recently-used map of at most `limit` streams. A sender that names a new stream in every
message (200,000 distinct streams grew a node by ~100 MB) then costs a bounded amount of memory;
the streams forgotten are counted, and a node reports them.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Refusals", "BoundedStreams", "RateLimitedErrors", "shown", "MAX_STREAMS", "FIRST_LOGGED", "LOG_EVERY_S"]

FIRST_LOGGED = 10  # refusals of one kind logged one by one; after that, one line per LOG_EVERY_S
LOG_EVERY_S = 5.0
MAX_KINDS = 64  # kinds counted by name; the rest (a sender inventing input ids) under "other"
MAX_REASON = 300  # characters of a reason in the log
# Streams per node whose state is kept: a real dataflow has one per upstream node run (a few);
# each costs up to a sequence tracker's horizon (4,096 seqs) at worst.
MAX_STREAMS = 256

V = TypeVar("V")


def shown(value: object) -> str:
    """A hostile value in an error message, short: its type and the start of its repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


PACED = {"paced": True}  # a log record's `extra`: its logger paces it already (RateLimitedErrors lets it by)


def _words(reason: str | Callable[[], str]) -> str:
    return (reason if isinstance(reason, str) else reason())[:MAX_REASON]


class Refusals:
    """Inputs refused, counted by kind; logged one by one for the first FIRST_LOGGED of each kind,
    then once per LOG_EVERY_S with how many more came (and the last reason)."""

    def __init__(self, log: logging.Logger, clock: Callable[[], float] = time.monotonic):
        self.log = log
        self.clock = clock
        self.counts: dict[str, int] = {}
        self.unexpected = 0  # of them, exceptions out of the node's own code (`raised`): bugs
        self._quiet: dict[str, tuple[float, int]] = {}  # kind -> (last line's time, how many not logged since)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def refuse(self, kind: str, reason: str | Callable[[], str]) -> None:
        """Count one refused input of `kind` (e.g. "ack: malformed"), log it (rate-limited).
        `reason` may be a function that says it: called only when a line is logged, so a flood
        of bad inputs costs a count each, not the words for each (a 10 kB value's repr)."""
        if kind not in self.counts and len(self.counts) >= MAX_KINDS:
            kind = "other"
        n = self.counts.get(kind, 0) + 1
        self.counts[kind] = n
        if n <= FIRST_LOGGED:
            words = _words(reason)
            more = " (later ones are summarised)" if n == FIRST_LOGGED else ""
            self.log.error("refused %s: %s%s", kind, words, more, extra=PACED)
            if n == FIRST_LOGGED:
                self._quiet[kind] = (self.clock(), 0)
            return
        last, unlogged = self._quiet[kind]
        now = self.clock()
        if now - last >= LOG_EVERY_S:
            self.log.error(
                "refused %d more %s in %.0f s (%d in all), the last: %s",
                unlogged + 1,
                kind,
                now - last,
                n,
                _words(reason),
                extra=PACED,
            )
            self._quiet[kind] = (now, 0)
        else:
            self._quiet[kind] = (last, unlogged + 1)

    def raised(self, kind: str, error: BaseException) -> None:
        """An input whose handling raised `error` in the node's own code: refused like any bad
        input, and counted as unexpected (the node's exit status says so); the first of each kind
        is logged with its traceback, for the bug report."""
        self.unexpected += 1
        if kind not in self.counts:
            self.log.error("an input raised in the node's own code (%s)", kind, exc_info=error, extra=PACED)
        self.refuse(kind, f"{type(error).__name__}: {error}")

    def summary(self) -> str:
        """The line a node logs at its end ("" when nothing was refused), e.g.
        "refused 12 inputs: ack: malformed ack 10, jpeg: bad JPEG 2"."""
        if not self.counts:
            return ""
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(self.counts.items()))
        return f"refused {self.total} inputs: {kinds}"


class BoundedStreams(Generic[V]):
    """stream -> state, at most `limit` streams: the least recently used is forgotten (counted in
    `forgotten`; `on_forget(stream, state)` is told, e.g. to fold its figures into a total)."""

    def __init__(
        self,
        make: Callable[[], V],
        limit: int = MAX_STREAMS,
        on_forget: Callable[[str, V], None] | None = None,
    ):
        if limit < 1:
            raise ValueError(f"limit: expected at least 1, got {limit}")
        self.make = make
        self.limit = limit
        self.on_forget = on_forget
        self._items: OrderedDict[str, V] = OrderedDict()
        self.forgotten = 0

    def get(self, stream: str) -> V | None:
        """The state of `stream` (marked as just used), or None."""
        state = self._items.get(stream)
        if state is not None:
            self._items.move_to_end(stream)
        return state

    def state(self, stream: str) -> V:
        """The state of `stream`, made (and the least recently used forgotten) if new."""
        state = self.get(stream)
        if state is None:
            state = self._items[stream] = self.make()
            while len(self._items) > self.limit:
                old, gone = self._items.popitem(last=False)
                self.forgotten += 1
                if self.on_forget is not None:
                    self.on_forget(old, gone)
        return state

    def __contains__(self, stream: object) -> bool:
        return stream in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def items(self):
        return self._items.items()

    def values(self):
        return self._items.values()


class RateLimitedErrors(logging.Filter):
    """A filter for a node's log handler: error lines logged per bad message ("bad JPEG skipped:
    ...", "bad frame skipped: ...") pass one by one for the first FIRST_LOGGED of each call site
    (logger and message template), then one per LOG_EVERY_S, saying how many like it were not
    shown. What a node counts is unchanged: its summary still has every bad message. Records
    marked `extra=PACED` (Refusals paces its own) and lines below ERROR always pass."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.clock = clock
        self._sites: dict[tuple[str, str], list] = {}  # (logger, template) -> [seen, last shown, hidden since]
        self.settled = False  # the run is over: every line passes (the end report is bounded by design)

    def settle(self) -> list[tuple[str, int]]:
        """The run is over: -> (template, lines not shown since its last line) of each call site
        that has some, and from now on every line passes."""
        self.settled = True
        return [(template, site[2]) for (_, template), site in self._sites.items() if site[2]]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.settled or record.levelno < logging.ERROR or getattr(record, "paced", False):
            return True
        key = (record.name, str(record.msg))
        site = self._sites.get(key)
        if site is None:
            if len(self._sites) >= 4 * MAX_KINDS:
                return True  # templates are the code's, few: this bound is never reached
            site = self._sites[key] = [0, 0.0, 0]
        site[0] += 1
        now = self.clock()
        if site[0] <= FIRST_LOGGED:
            site[1] = now
            return True
        if now - site[1] < LOG_EVERY_S:
            site[2] += 1
            return False
        hidden, site[1], site[2] = site[2], now, 0
        if hidden:
            record.msg = f"{record.getMessage()} ({hidden} more like this in the last {LOG_EVERY_S:.0f} s not shown)"
            record.args = None
        return True
