"""bench/header_cost.py: the worst headers within the limits, and just past them."""

from __future__ import annotations

import pytest

from tests.support.bench import check_envelope, check_goals, positive, run_script


@pytest.mark.slow  # builds every header at the limits (binary searches over tc.encode)
def test_header_cost_builds_every_case_and_each_is_handled_as_built(tmp_path):
    """Every case is built at (or past) the current limits, decoded once and measured; each is
    accepted or refused as it was built to be (a change to the limits or to the decoder that
    breaks a case shows here), with a time, its json.loads baseline and a memory peak."""
    data = run_script("header_cost", ["--repeat", "1"], tmp_path / "header_cost.json")
    check_envelope(data, "header_cost")
    rows = data["rows"]
    assert {r["expected"] for r in rows} == {"accepted", "refused"}
    for row in rows:
        assert row["outcome"] == row["expected"], row["case"]
        assert positive(row["bytes"]) and positive(row["seconds"]) and positive(row["peak_bytes"]), row
        assert row["median_seconds"] >= row["seconds"] and positive(row["json_loads_seconds"]), row
    assert data["limits"]["header_bytes"] > 0
    check_goals(data["goals"])
    assert data["goals"][-1]["measured"] == 0  # each case accepted or refused as built
