"""Waiting on asynchronous state with a deadline (another thread, process or fake device event
moves it along)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WAIT_TIMEOUT_S = 30.0


def wait_until(
    observe: Callable[[], Any],
    until: Callable[[Any], bool] = bool,
    *,
    timeout: float = WAIT_TIMEOUT_S,
    describe: str | Callable[[], str] = "the condition",
    interval: float = 0.001,
    max_interval: float = 0.05,
) -> Any:
    """Poll `observe()` until `until(value)` holds (by default: until the value is truthy); -> that
    value.

    For state that another thread, process or (fake) device event moves along: wait for a
    condition with a generous deadline instead of reading it at one instant, which a busy machine
    makes arbitrary. Past the deadline, fail naming what was awaited and the last value observed
    (`describe` may be a callable, called then, to add what the value alone does not say).

    Not for "X has not happened yet": assert that directly, once the event that would make it
    happen is held by the test (a fake marker, a view still referenced), so it cannot race.
    """
    deadline = time.monotonic() + timeout
    pause = interval
    while True:
        value = observe()
        if until(value):
            return value
        if time.monotonic() >= deadline:
            what = describe() if callable(describe) else describe
            raise AssertionError(f"waited {timeout:g} s for {what}; last observed: {value!r}")
        time.sleep(pause)
        pause = min(pause * 2, max_interval)
