"""The small pieces of dora plumbing the node loop (loop.py) and the nodes share."""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

__all__ = [
    "setup_logging",
    "settle_pacing",
    "settle_heap",
    "Pacer",
    "drain",
    "finish_sharing",
]


def setup_logging(name: str) -> logging.Logger:
    """Lines on stderr prefixed with the node's name; dora collects them into its logs. Error
    lines logged per bad message are paced (hostile.RateLimitedErrors): a flood of bad input must
    not become a flood of log lines."""
    from .hostile import RateLimitedErrors

    root = logging.getLogger()
    if not root.handlers:  # as logging.basicConfig: a process that set up its own logging keeps it
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(f"{name}: %(levelname)s %(message)s"))
        handler.addFilter(RateLimitedErrors())
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    return logging.getLogger(name)


def settle_pacing(log: logging.Logger) -> None:
    """The run is over: say how many paced error lines were not shown since their last one, and
    let the end report through whole."""
    from .hostile import RateLimitedErrors

    for handler in logging.getLogger().handlers:
        for f in handler.filters:
            if isinstance(f, RateLimitedErrors):
                for template, hidden in f.settle():
                    log.error("%d more lines like %r were not shown (paced)", hidden, template[:80])


def settle_heap() -> None:
    """Call once started, before the first message: collect, then move every object alive now
    (torch's, dora's, the node's modules: several hundred thousand) out of the garbage
    collector's reach (`gc.freeze`). Otherwise the first full collection of the run walks them
    all while messages wait: in the default pipeline the receiver stalled about 250 ms a few
    messages in, and that stall was the p99 latency of the whole run on every input."""
    gc.collect()
    gc.freeze()


def drain(node: Any) -> list[dict]:
    """Every event already queued, without blocking (a source's way to see STOP and acks).

    `node.next(timeout=...)` is not used for waiting: in dora 1.1 each timeout builds an error
    event with a backtrace and costs about 5 ms.
    """
    events: list[dict] = []
    while True:
        event = node.try_recv()
        if event is None:
            return events
        events.append(event)


class Pacer:
    """Deadlines at a fixed rate without drift; after a stall it restarts from now instead of
    bursting to catch up. rate 0 = no pacing."""

    def __init__(self, rate: float, clock=time.monotonic):
        self.period = 1.0 / rate if rate > 0 else 0.0
        self.clock = clock
        self.deadline: float | None = None

    def wait_time(self) -> float:
        """Seconds until the next send is due (0 = now)."""
        if not self.period or self.deadline is None:
            return 0.0
        return max(0.0, self.deadline - self.clock())

    def sent(self) -> None:
        if not self.period:
            return
        now = self.clock()
        if self.deadline is None or now - self.deadline > self.period:
            self.deadline = now + self.period
        else:
            self.deadline += self.period

    def sleep(self, limit: float = 0.002) -> None:
        """Sleep until the deadline, at most `limit` seconds (so the caller can poll events)."""
        pause = min(self.wait_time(), limit)
        if pause > 0:
            time.sleep(pause)


def finish_sharing(log: logging.Logger, timeout_s: float = 10.0) -> None:
    """Call before a node that sends with tc.send exits. transport="auto" may have shared GPU
    memory with consumers on this machine (CUDA IPC), and that memory dies with this process:
    wait until they released it. Returns at once when nothing was shared."""
    import tensor_codec as tc

    if not tc.ipc_flush(timeout_s):
        log.warning(
            "exiting with CUDA IPC messages still held by receivers after %g s; they will get errors", timeout_s
        )
