"""bench/cuda_ipc.py (with bench/_ipc_latency_node.py) on the tests' CPU stand-in backend: the same
dora dataflow, sender and receiver code as on a GPU (issue 30: its sender once never started, as
no CPU run touched it)."""

from __future__ import annotations

import pytest

from tests.support.bench import check_envelope, check_goals, load_module, positive, run_script

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
    assert set(rows) == {(c, s) for c in ("cuda-ipc", "host-to-gpu", "cpu+host+cuda") for s in (4, 16)}
    assert all(positive(v) for v in rows.values()), rows
    assert positive(data["codec_us"]) and positive(data["flat_ratio"]) and positive(data["speedup"])
    assert set(data["host_faster_kb"]) <= {4, 16}
    assert data["ipc_min_bytes"] == 0 and data["recommended_ipc_min_bytes"] in (None, 0, 16 * 1024)
    assert positive(data["auto_vs_host"])
    check_goals(data["goals"])
    assert [g["met"] for g in data["goals"]] == [None, None, None, None]


@pytest.mark.parametrize(
    "ipc, host, floor",
    [
        ({4: 0.2, 64: 0.2, 1024: 0.3}, {4: 0.3, 64: 0.4, 1024: 0.9}, 0),  # CUDA IPC wins everywhere
        ({4: 0.3, 64: 0.3, 1024: 0.3}, {4: 0.2, 64: 0.25, 1024: 0.9}, 1024 * 1024),
        ({4: 0.3, 64: 0.2, 1024: 0.3}, {4: 0.2, 64: 0.25, 1024: 0.9}, 64 * 1024),
        ({4: 0.2, 64: 0.3, 1024: 0.2}, {4: 0.3, 64: 0.25, 1024: 0.9}, 1024 * 1024),  # a loss above a win
        ({4: 0.3, 64: 0.3, 1024: 0.9}, {4: 0.2, 64: 0.2, 1024: 0.3}, None),  # host wins at the top
    ],
)
def test_the_floor_the_figures_ask_for(monkeypatch, ipc, host, floor):
    bench = load_module("cuda_ipc", monkeypatch)
    sizes = sorted(ipc)
    assert bench.recommended_floor(sizes, ipc, host) == floor
    if floor is not None:
        worst, _ = bench.auto_vs_host(sizes, floor, ipc, host, host)
        assert worst <= 1.0  # at the floor the figures ask for, auto takes the faster path everywhere


def test_auto_at_a_floor_too_low_is_caught(monkeypatch):
    bench = load_module("cuda_ipc", monkeypatch)
    ipc, to_gpu = {4: 0.3, 64: 0.2}, {4: 0.2, 64: 0.5}
    worst, at = bench.auto_vs_host([4, 64], 0, ipc, to_gpu, to_gpu)
    assert (round(worst, 2), at) == (1.5, 4)


def test_auto_is_credited_with_the_path_it_takes_not_the_best_host_one(monkeypatch):
    """Under the floor auto sends host bytes onto the GPU; a faster .cpu() path is not its time."""
    bench = load_module("cuda_ipc", monkeypatch)
    ipc, to_gpu, cpu_path = {4: 0.3, 64: 0.2}, {4: 0.25, 64: 0.5}, {4: 0.2, 64: 0.5}
    best = {s: min(to_gpu[s], cpu_path[s]) for s in ipc}
    worst, at = bench.auto_vs_host([4, 64], 64 * 1024, ipc, to_gpu, best)
    assert (round(worst, 2), at) == (1.25, 4)
