"""bench/small_message.py: encode + decode of a 1 KB BoundingBoxes, warm and cold headers, against
the pa.array baseline."""

from __future__ import annotations

from tests.support.bench import check_envelope, check_goals, positive, run_script


def test_small_message_runs_every_case_and_writes_its_rows(tmp_path):
    """All four cases are timed (tiny batches) and written as rows with a time and a ratio to the
    baseline, with the two goals of issue 18."""
    data = run_script("small_message", ["--batch", "5", "--batches", "1"], tmp_path / "small_message.json")
    check_envelope(data, "small_message")
    assert (data["batch"], data["batches"]) == (5, 1)
    assert [r["case"] for r in data["rows"]] == ["baseline", "warm", "cold", "wrap_only"]
    for row in data["rows"]:
        assert positive(row["us"]) and positive(row["ratio"]), row
        assert data[f"{row['case']}_us"] == row["us"]
    assert data["rows"][0]["ratio"] == 1.0
    check_goals(data["goals"])
    assert len(data["goals"]) == 2
