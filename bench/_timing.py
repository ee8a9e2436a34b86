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


def resampled_medians(
    samples: dict[str, list[float]], resamples: int = 1000, seed: int = 0, paired: bool = False
) -> dict[str, object]:
    """Each contender's median recomputed on `resamples` resamples of its values (drawn with
    replacement, as many as it has; numpy arrays): a percentile bootstrap, from which
    `interval` says how far a figure made of medians could have moved by the luck of which
    messages in this run were slow. Seeded: the same run's values give the same intervals.

    `paired`: the i-th value of every contender was measured in the same round (as many values
    each), and a resample draws rounds, the same for all: what a round's load did to every
    contender alike moves all their medians together, so it stays out of a figure that compares
    them (a difference, a ratio), which drawing each contender's values alone would leave in."""
    import numpy as np

    rng = np.random.default_rng(seed)
    arrays = {name: np.asarray(values, dtype=float) for name, values in samples.items()}
    if paired:
        lengths = {len(values) for values in arrays.values()}
        if len(lengths) != 1:
            raise ValueError(f"paired: expected as many values for every contender, got {sorted(lengths)}")
        rounds = rng.integers(0, lengths.pop(), size=(resamples, len(next(iter(arrays.values())))))
        return {name: np.median(values[rounds], axis=1) for name, values in arrays.items()}
    return {
        name: np.median(rng.choice(values, size=(resamples, len(values))), axis=1) for name, values in arrays.items()
    }


def interval(values, level: float = 0.95) -> tuple[float, float]:
    """The central `level` interval of a figure's resampled values (see `resampled_medians`)."""
    import numpy as np

    low, high = np.quantile(np.asarray(values, dtype=float), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)
