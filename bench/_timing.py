"""Timing helpers: medians of repeated batches (robust to the noise of shared machines)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def per_call_seconds(fn: Callable[[], object], *, batch: int, batches: int = 15, warmup: int = 3) -> float:
    """Median over `batches` of the mean time of one call in a batch of `batch` calls."""
    for _ in range(warmup):
        for _ in range(batch):
            fn()
    results = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        results.append((time.perf_counter() - start) / batch)
    return statistics.median(results)


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} us"


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms"
