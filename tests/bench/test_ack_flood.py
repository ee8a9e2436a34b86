"""bench/ack_flood.py: the tensor sender's throughput under a sustained flood of junk acks, against
the same dataflow clean, in real dora dataflows (the node fuzzer's sender flow)."""

from __future__ import annotations

import pytest

from tests.support.bench import check_envelope, check_goals, positive, run_script

pytestmark = [pytest.mark.dora, pytest.mark.slow]


def test_ack_flood_runs_a_clean_and_a_flooded_sender_and_writes_their_ratio(dora_cli, tmp_path):
    data = run_script(
        "ack_flood", ["--rounds", "1", "--real", "200", "--flood-rate", "2000"], tmp_path / "ack_flood.json"
    )
    check_envelope(data, "ack_flood")
    (row,) = data["rounds"]
    assert row["clean"]["ok"] and row["flooded"]["ok"], row
    clean, flooded = row["clean"], row["flooded"]
    assert all(positive(f) for f in (clean["span_per_s"], flooded["span_per_s"], flooded["flood_acks_per_s"])), row
    assert positive(row["ratio"]), row
    assert row["clean"]["flood_acks_per_s"] is None  # the clean run really was clean
    assert data["ratio"] == row["ratio"] and data["flood_rate"] == 2000
    check_goals(data["goals"])
    assert {g["name"] for g in data["goals"]} == {"sender throughput under the flood", "junk acks taken per second"}
