"""The optional packages some tests need (torchcodec, nvImageCodec, rerun-sdk, matplotlib, the
dora hub nodes): is one importable here, and if not, a skip that says which and why.

A test module must import without them (its other tests still run), so nothing here is imported
at module level by the tests: they ask for a package where they use it (`import_or_skip`) or
mark the tests that need it (`needs`). tests/test_optional_packages.py checks that with the
import blocker in tests/support/without_optional/."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


def missing(module: str) -> str | None:
    """None when `module` imports; otherwise why not, naming it. An installed package whose
    native library does not load (torchcodec built for another torch raises OSError) is as
    good as missing."""
    try:
        importlib.import_module(module)
    except (ImportError, OSError) as e:
        first_line = str(e).partition("\n")[0]  # a native loader's message can run to many lines
        return f"{module} does not import ({type(e).__name__}: {first_line})"
    return None


def import_or_skip(module: str) -> ModuleType:
    """`module`, imported; skips the calling test, with the reason, where it does not import."""
    reason = missing(module)
    if reason is not None:
        pytest.skip(reason)
    return importlib.import_module(module)


def needs(module: str) -> pytest.MarkDecorator:
    """A mark that skips a test, with the reason, where `module` does not import (decided at
    collection: for tests that would otherwise do costly work before reaching the package)."""
    reason = missing(module)
    return pytest.mark.skipif(reason is not None, reason=reason or "")
