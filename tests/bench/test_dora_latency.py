"""bench/dora_latency.py (with bench/_latency_node.py): end-to-end latency through a real dora
dataflow, tc.send / tc.receive against send_output_raw and the pa.array pattern."""

from __future__ import annotations

import random
import statistics

import pytest

from tests.support.bench import BENCH, check_envelope, check_goals, load_module, positive, run_script

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
    # Each ratio and the own cost would say how far this run's luck could have moved them; two
    # messages a contender are too few to say.
    judged = [g for g in data["goals"] if "pa.array" in g["name"] or "own cost" in g["name"]]
    assert len(judged) == 5 and all("95% interval: too few messages" in g["detail"] for g in judged), judged
    (row,) = data["primitives"].values()
    assert row["picked"] in ("send_output", "send_output_raw") and positive(row["tc:send_output_raw"]), row
    assert row["own_cost_us_interval"] is None
    assert data["messages_per_contender"] == [2]


def test_every_size_sends_the_same_bytes_per_contender(monkeypatch):
    """`--reps` is the largest size's count; a smaller size sends as many more messages as its
    messages are smaller, so the small sizes, where tc's goal is a few microseconds, have the
    thousands of messages that resolve it."""
    bench = load_module("dora_latency", monkeypatch)
    assert bench.messages_per_contender([1, 4, 16, 64], 15) == [960, 240, 60, 15]
    assert bench.messages_per_contender([1, 4, 16, 64], 40) == [2560, 640, 160, 40]
    assert bench.messages_per_contender([1], 2000) == [2000]  # one size: as asked (the split's runs)
    assert bench.messages_per_contender([3, 1], 1) == [1, 3]


def test_a_figure_of_medians_gets_an_interval_that_narrows_with_more_messages(monkeypatch):
    """The bootstrap behind each judged figure: seeded (the same values, the same interval), it
    holds the figure the full values give, and thousands of messages pin down a 10 us offset
    that twenty leave open to zero."""
    monkeypatch.syspath_prepend(str(BENCH))
    from _timing import interval, resampled_medians

    rng = random.Random(7)

    def latencies(n, offset):
        return [100.0 + offset + rng.uniform(-60, 60) for _ in range(n)]

    def offset_interval(n):
        slow, fast = latencies(n, 10), latencies(n, 0)
        boot = resampled_medians({"slow": slow, "fast": fast})
        again = resampled_medians({"slow": slow, "fast": fast})
        assert (boot["slow"] == again["slow"]).all()  # seeded
        low, high = interval(boot["slow"] - boot["fast"])
        assert low <= statistics.median(slow) - statistics.median(fast) <= high
        return low, high

    few, many = offset_interval(20), offset_interval(2000)
    assert few[0] < 0 < few[1]  # twenty messages a contender cannot tell 10 us from nothing
    assert 0 < many[0] < 10 < many[1] and many[1] - many[0] < (few[1] - few[0]) / 4


def test_rounds_drawn_together_keep_a_shared_drift_out_of_a_difference(monkeypatch):
    """Contenders measured round by round share each round's load: drawing rounds (paired) keeps
    that drift out of the interval of their difference, which drawing each contender's messages
    alone leaves in. The benchmark pairs its rows by the round each carries; a round a message
    was lost from is left out for every contender, so the pairs stay in step."""
    bench = load_module("dora_latency", monkeypatch)
    from _timing import interval, resampled_medians

    rng = random.Random(11)
    drift = [rng.uniform(-200, 200) for _ in range(400)]  # each round's load, the same for both
    slow = [100 + 10 + d + rng.uniform(-5, 5) for d in drift]
    fast = [100 + d + rng.uniform(-5, 5) for d in drift]
    alone = resampled_medians({"slow": slow, "fast": fast})
    paired = resampled_medians({"slow": slow, "fast": fast}, paired=True)
    wide, narrow = interval(alone["slow"] - alone["fast"]), interval(paired["slow"] - paired["fast"])
    assert wide[0] < 0 < 10 < wide[1]  # the drift's spread: 10 not told from nothing
    assert 0 < narrow[0] < 10 < narrow[1] and narrow[1] - narrow[0] < (wide[1] - wide[0]) / 4
    with pytest.raises(ValueError, match="as many values for every contender"):
        resampled_medians({"slow": slow, "fast": fast[:-1]}, paired=True)

    def rows(latencies, contender, lost=()):
        return [
            {"layout": "contiguous", "size_mb": 1, "contender": contender, "round": k, "latency_ns": ms * 1e6}
            for k, ms in enumerate(latencies)
            if k not in lost
        ]

    # A message lost from each contender (other rounds): their counts still match, the pairs must not shift.
    got, pairs = bench.round_samples(
        rows(slow, "slow", {3}) + rows(fast, "fast", {7}), "contiguous", 1, ("slow", "fast")
    )
    kept = [k for k in range(len(drift)) if k not in (3, 7)]
    assert pairs and got == {
        "slow": pytest.approx([slow[k] for k in kept]),
        "fast": pytest.approx([fast[k] for k in kept]),
    }
    ((low, high),) = bench.judged_intervals(got, lambda m: m["slow"] - m["fast"], paired=pairs)
    assert 0 < low < 10 < high and high - low < (wide[1] - wide[0]) / 4
    unnumbered = [{k: v for k, v in r.items() if k != "round"} for r in rows(slow, "slow") + rows(fast, "fast")]
    got, pairs = bench.round_samples(unnumbered, "contiguous", 1, ("slow", "fast"))
    assert not pairs and got == {"slow": pytest.approx(slow), "fast": pytest.approx(fast)}  # each contender's own


def test_a_judged_figure_gets_no_interval_from_too_few_messages(monkeypatch):
    """Under INTERVAL_MIN_MESSAGES a contender the interval is left out (and said so), not
    printed as if it meant something."""
    bench = load_module("dora_latency", monkeypatch)
    need = bench.INTERVAL_MIN_MESSAGES

    def ratio(m):
        return m["a"] / m["b"]

    assert bench.judged_intervals({"a": [2.0] * need, "b": [1.0] * (need - 1)}, ratio) == [None]
    ((low, high),) = bench.judged_intervals({"a": [2.0] * need, "b": [1.0] * need}, ratio)
    assert low == high == 2.0
    assert "too few messages" in bench.interval_text(None, ".2f")
    assert bench.interval_text((0.5, 1.25), ".2f", " us") == "95% interval 0.50 to 1.25 us"


def test_split_takes_tcs_cost_apart_in_one_dataflow(dora_cli, tmp_path):
    """--split: the floor and tc's parts (its metadata carried by dora, its sender alone, its
    receiver alone, both) through one dataflow; each row has its latency over the floor's, its
    receiver's own time, its sender's CPU time in the send and the part before dora's call
    (both over the floor's), and every message arrived usable."""
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
    assert cells["send_output"]["send_cpu_over_floor_us"] == 0
    assert cells["send_output"]["before_dora_over_floor_us"] == 0
    for name, row in cells.items():
        assert positive(row["latency_us"]) and positive(row["receive_us"]), (name, row)
        # The sender's thread ran for part of the latency (dora's copy of 1 MB at least), and
        # every contender calls dora: its own work before the call is part of its send.
        assert 0 < row["before_dora_us"] < row["send_cpu_us"] < row["latency_us"], (name, row)


def test_profile_attributes_samples_to_tc_frames_and_leaves_imports_out(tmp_path, monkeypatch):
    """--profile's reading of py-spy's raw samples: only stacks under tc's frames count, an import
    (the first message's, once) is left out, and each sample is placed at its innermost Python
    frame with the native frame it was in."""
    bench = load_module("dora_latency", monkeypatch)
    samples = tmp_path / "sender-1MB.txt"
    node = "<module> (/x/bench/_latency_node.py:9)"
    send = "send (/x/tensor_codec/dora/output.py:180)"
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
    per_message, where = bench.attribute(samples, [("send", "output.py")], messages=10)
    us = 1e6 / bench.SAMPLE_HZ / 10
    assert per_message == pytest.approx(40 * us)
    assert where == [
        ("send (output.py) > memcpy (libc.so.6)", pytest.approx(30 * us)),
        ("send (output.py)", pytest.approx(10 * us)),
    ]
