"""Contenders measured in interleaved rounds against a baseline measured in the same rounds (the
JPEG benchmarks): each warmed once, then every round measures the baseline and then every
contender, each round starting one contender further on, so a machine's drift hits all alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


def interleaved(
    rows: list, rounds: int, measure: Callable, baseline_label: str, baseline: Callable[[], float]
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """`rows`: dataclasses with `label`, `n`, `batch` and `workers`; `measure(row) -> rate`. The
    warm-up measures each row over min(n, 2 x batch x workers) items (thread pools, codec state,
    the engines' buffers). -> (rates per label, the baseline's included; why each failed row
    failed: it is measured no more)."""
    results: dict[str, list[float]] = {baseline_label: []}
    failed: dict[str, str] = {}
    for row in rows:
        try:
            measure(dataclasses.replace(row, n=min(row.n, 2 * row.batch * row.workers)))
            results[row.label] = []
        except Exception as e:
            failed[row.label] = f"{type(e).__name__}: {str(e)[:300]}"
    for r in range(rounds):
        results[baseline_label].append(baseline())
        for row in rows[r % len(rows) :] + rows[: r % len(rows)] if rows else []:
            if row.label in failed:
                continue
            try:
                results[row.label].append(measure(row))
            except Exception as e:
                failed[row.label] = f"{type(e).__name__}: {str(e)[:300]}"
                results.pop(row.label, None)
    return results, failed
