"""bench/jpeg_node_standin.py: the encoder node's path against its engine alone on the CPU stand-in
of a GPU engine, at a tiny size (the figures themselves are the benchmark's, not the test's)."""

from __future__ import annotations

from tests.support.bench import check_envelope, check_goals, positive, run_script


def test_jpeg_node_standin_measures_each_setting_against_its_engine_alone(tmp_path):
    data = run_script(
        "jpeg_node_standin",
        ["--frames", "24", "--rounds", "1", "--settings", "4x1,2x2", "--per-frame-us", "100", "--receive-us", "20"],
        tmp_path / "jpeg_node_standin.json",
    )
    check_envelope(data, "jpeg_node_standin")
    assert [(r["batch"], r["workers"]) for r in data["rows"]] == [(4, 1), (2, 2)]
    for row in data["rows"]:
        assert positive(row["engine_fps"]) and positive(row["node_fps"]) and positive(row["ratio"]), row
        assert set(row["per_frame_us"]) == {"receive", "accept", "dispatch", "wait", "collect"}
        assert sum(int(size) * count for size, count in row["batches"].items()) == 24  # every frame in one batch
        assert max(int(size) for size in row["batches"]) <= row["batch"]
    check_goals(data["goals"])
    assert [g["name"] for g in data["goals"]] == [
        "stand-in node path >= 90% of its engine (batch 4, 1 worker)",
        "stand-in node path >= 90% of its engine (batch 2, 2 workers)",
    ]
