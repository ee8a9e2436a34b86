"""bench/host_staging.py on the CPU (`--stand-in`): plain copies against a registered region, the
registration's cost and its break-even, through the script's own code."""

from __future__ import annotations

import math

from tests.support.bench import check_envelope, positive, run_script


def test_host_staging_measures_plain_and_registered_copies_per_size(tmp_path):
    """Each size gets both directions plain and registered, the registration's cost, their
    ratios, and after how many reuses a registration pays (None: never)."""
    data = run_script(
        "host_staging", ["--stand-in", "--sizes-kb", "4,64", "--reps", "2"], tmp_path / "host_staging.json"
    )
    check_envelope(data, "host_staging")
    assert [r["kb"] for r in data["rows"]] == [4, 64]
    for row in data["rows"]:
        for key in ("d2h_plain_ms", "d2h_registered_ms", "h2d_plain_ms", "h2d_registered_ms", "register_ms"):
            assert positive(row[key]), (key, row)
        assert positive(row["d2h_ratio"]) and positive(row["h2d_ratio"])
        reuses = row["break_even_reuses"]
        assert reuses is None or (math.isfinite(reuses) and reuses >= 0), row
    assert data["goals"] == []
