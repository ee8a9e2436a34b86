"""The limits in force in this process (docs/wire-format.md, section 7a, says what each bounds,
its default and how a user sets it): read from the environment on first use or set in code, and
the caches of what was checked against them told when they change. The bounds and their checks
are wire/limits.py's.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable

from .errors import UsageError
from .wire.limits import Limits

__all__ = ["Limits", "current", "set_limits", "on_change"]

_lock = threading.Lock()
_current: Limits | None = None
_listeners: list = []
# Bumped at every change: what was checked under an older generation is checked again (an
# attribute read, for the senders' prepared messages, which check it per message).
generation = 0


def current() -> Limits:
    """The limits in force in this process (the environment is read on first use)."""
    limits = _current
    if limits is None:
        limits = _from_environment()
        _install(limits)
    return limits


def set_limits(limits: Limits | None = None, **changes: int) -> Limits:
    """Replace this process's limits (all of them, or some by name); -> the previous ones."""
    previous = current()
    names = [f.name for f in dataclasses.fields(Limits)]
    unknown = set(changes) - set(names)
    if unknown:
        raise UsageError(f"set_limits: expected keywords among {names}, got unexpected {sorted(unknown)}")
    base = previous if limits is None else limits
    if not isinstance(base, Limits):
        raise UsageError(f"set_limits: expected a tensor_codec.Limits, got {type(base).__name__}")
    _install(dataclasses.replace(base, **changes))
    return previous


def on_change(callback: Callable[[], object]) -> None:
    """Call `callback()` whenever the limits change (caches of validated headers clear)."""
    _listeners.append(callback)


def _install(limits: Limits) -> None:
    global _current, generation
    with _lock:
        _current = limits
        generation += 1
    for callback in _listeners:
        callback()


def _from_environment() -> Limits:
    changes = {}
    for field in dataclasses.fields(Limits):
        name = "TC_MAX_" + field.name.upper()
        text = os.environ.get(name, "").strip()
        if not text:
            continue
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise UsageError(f"{name}: expected a positive integer, got {text!r}")
        changes[field.name] = int(text)
    return Limits(**changes)
