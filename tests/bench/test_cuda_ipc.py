"""bench/cuda_ipc.py (with bench/_ipc_latency_node.py) on the tests' CPU stand-in backend: the same
dora dataflow, sender and receiver code as on a GPU (issue 30: its sender once never started, as
no CPU run touched it)."""

from __future__ import annotations

import pytest

from tests.support.bench import check_envelope, check_goals, positive, run_script

pytestmark = [pytest.mark.dora, pytest.mark.slow]


def test_cuda_ipc_bench_runs_both_contenders_through_dora(dora_cli, tmp_path):
    """Two sizes, three messages each per contender: the sender node starts and iterates its
    events, every message reaches the receiver (CUDA IPC over the stand-in, and host bytes), the
    codec's own time is measured on both sides, and the goals are written unjudged."""
    data = run_script(
        "cuda_ipc",
        ["--stand-in", "--sizes-kb", "4,16", "--reps", "3", "--warmup", "1"],
        tmp_path / "cuda_ipc.json",
    )
    check_envelope(data, "cuda_ipc")
    assert "stand-in" in data["baseline"]
    rows = {(r["contender"], r["size_kb"]): r["p50_ms"] for r in data["rows"]}
    assert set(rows) == {(c, s) for c in ("cuda-ipc", "cpu+host+cuda") for s in (4, 16)}
    assert all(positive(v) for v in rows.values()), rows
    assert positive(data["codec_us"]) and positive(data["flat_ratio"]) and positive(data["speedup"])
    assert set(data["host_faster_kb"]) <= {4, 16}
    check_goals(data["goals"])
    assert [g["met"] for g in data["goals"]] == [None, None, None]
