"""bench/dora_latency.py (with bench/_latency_node.py): end-to-end latency through a real dora
dataflow, tc.send / tc.receive against send_output_raw and the pa.array pattern."""

from __future__ import annotations

import pytest

from tests.support.bench import check_envelope, check_goals, load_module, positive, run_script

pytestmark = [pytest.mark.dora, pytest.mark.slow]


def test_dora_latency_sends_every_layout_and_contender_through_dora(dora_cli, tmp_path):
    """One 1 MB size, two messages per layout and contender: the sender and receiver nodes start,
    every message arrives with its shape and dtype, and each (layout, contender) is written as a
    row of latencies, with the summary's ratios and the goals."""
    data = run_script("dora_latency", ["--sizes", "1", "--reps", "2", "--warmup", "0"], tmp_path / "dora_latency.json")
    check_envelope(data, "dora_latency")
    assert data["sizes_mb"] == [1] and data["wrong"] == 0
    expected = {
        *(
            ("contiguous", c)
            for c in (
                "raw",
                "send_output",
                "send_output:uint8",
                "tc",
                "pa.array",
                "tc:send_output",
                "tc:send_output_raw",
            )
        ),
        *((layout, c) for layout in ("transposed", "strided_crop") for c in ("contiguous+raw", "tc", "pa.array")),
        *(("image", c) for c in ("raw", "tc", "pa.array")),
    }
    rows = data["rows"]
    assert {(r["layout"], r["contender"]) for r in rows} == expected and len(rows) == len(expected)
    for row in rows:
        assert row["size_mb"] == 1 and row["messages"] == 2, row
        assert all(positive(row[k]) for k in ("p10_ms", "p50_ms", "p90_ms")), row
    assert set(data["summary"]) == {"contiguous/1MB", "transposed/1MB", "strided_crop/1MB", "image/1MB"}
    for figures in data["summary"].values():
        assert all(positive(v) for v in figures.values()), figures
    check_goals(data["goals"])
    assert len(data["goals"]) == 11  # 8 of the ratios; the primitive and the unit tc picks, its own cost at 1 MB
    (row,) = data["primitives"].values()
    assert row["picked"] in ("send_output", "send_output_raw") and positive(row["tc:send_output_raw"]), row


def test_split_takes_tcs_cost_apart_in_one_dataflow(dora_cli, tmp_path):
    """--split: the floor and tc's parts (its metadata carried by dora, its sender alone, its
    receiver alone, both) through one dataflow; each row has its latency over the floor's and
    its receiver's own time, and every message arrived usable."""
    data = run_script(
        "dora_latency", ["--split", "--sizes", "1", "--reps", "2", "--warmup", "0"], tmp_path / "split.json"
    )
    check_envelope(data, "dora_latency_split")
    assert data["wrong"] == 0
    (cells,) = data["split"].values()
    assert list(cells) == [
        "send_output",
        "send_output+tc-metadata",
        "send_output+v1-keys",
        "tc.send-only",
        "tc.receive-only",
        "tc",
    ]
    assert cells["send_output"]["over_floor_us"] == 0
    for name, row in cells.items():
        assert positive(row["latency_us"]) and positive(row["receive_us"]), (name, row)


def test_profile_attributes_samples_to_tc_frames_and_leaves_imports_out(tmp_path, monkeypatch):
    """--profile's reading of py-spy's raw samples: only stacks under tc's frames count, an import
    (the first message's, once) is left out, and each sample is placed at its innermost Python
    frame with the native frame it was in."""
    bench = load_module("dora_latency", monkeypatch)
    samples = tmp_path / "sender-1MB.txt"
    node = "<module> (/x/bench/_latency_node.py:9)"
    send = "send (/x/tensor_codec/dora_adapter.py:880)"
    samples.write_text(
        "\n".join(
            [
                f"{node};{send};memcpy (libc.so.6) 30",
                f"{node};{send} 10",
                f"{node};{send};_find_and_load (<frozen importlib._bootstrap>:1) 500",
                f"{node};recv (libc.so.6) 900",
            ]
        )
    )
    per_message, where = bench.attribute(samples, [("send", "dora_adapter.py")], messages=10)
    us = 1e6 / bench.SAMPLE_HZ / 10
    assert per_message == pytest.approx(40 * us)
    assert where == [
        ("send (dora_adapter.py) > memcpy (libc.so.6)", pytest.approx(30 * us)),
        ("send (dora_adapter.py)", pytest.approx(10 * us)),
    ]
