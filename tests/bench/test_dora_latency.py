"""bench/dora_latency.py (with bench/_latency_node.py): end-to-end latency through a real dora
dataflow, tc.send / tc.receive against send_output_raw and the pa.array pattern."""

from __future__ import annotations

import pytest

from tests.support.bench import check_envelope, check_goals, positive, run_script

pytestmark = [pytest.mark.dora, pytest.mark.slow]


def test_dora_latency_sends_every_layout_and_contender_through_dora(dora_cli, tmp_path):
    """One 1 MB size, two messages per layout and contender: the sender and receiver nodes start,
    every message arrives with its shape and dtype, and each (layout, contender) is written as a
    row of latencies, with the summary's ratios and the goals."""
    data = run_script("dora_latency", ["--sizes", "1", "--reps", "2", "--warmup", "0"], tmp_path / "dora_latency.json")
    check_envelope(data, "dora_latency")
    assert data["sizes_mb"] == [1] and data["wrong"] == 0
    expected = {
        ("contiguous", "raw"),
        ("contiguous", "tc"),
        ("contiguous", "pa.array"),
        *((layout, c) for layout in ("transposed", "strided_crop") for c in ("contiguous+raw", "tc", "pa.array")),
    }
    rows = data["rows"]
    assert {(r["layout"], r["contender"]) for r in rows} == expected and len(rows) == len(expected)
    for row in rows:
        assert row["size_mb"] == 1 and row["messages"] == 2, row
        assert all(positive(row[k]) for k in ("p10_ms", "p50_ms", "p90_ms")), row
    assert set(data["summary"]) == {"contiguous/1MB", "transposed/1MB", "strided_crop/1MB"}
    for figures in data["summary"].values():
        assert all(positive(v) for v in figures.values()), figures
    check_goals(data["goals"])
    assert len(data["goals"]) == 6
