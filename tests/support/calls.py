"""Counting the C functions a call makes, however they are reached (a module's alias of torch's
function, a bound method): structural contracts on a message's path, which hold on any machine."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def with_c_calls_named(c_function: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """-> (what `call(*args, **kwargs)` returned, how many calls of C functions named
    `c_function` it made, seen by a profile hook)."""
    made = 0

    def profile(frame, event, arg):
        nonlocal made
        if event == "c_call" and getattr(arg, "__name__", None) == c_function:
            made += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = call(*args, **kwargs)
    finally:
        sys.setprofile(previous)
    return result, made
