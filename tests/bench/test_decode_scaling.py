"""bench/decode_scaling.py: the decode of a 64 MB tensor against a 1 KB one (and copy=True)."""

from __future__ import annotations

from tests.support.bench import check_envelope, check_goals, positive, run_script


def test_decode_scaling_times_both_sizes_and_the_copy(tmp_path):
    """Both decodes and the 64 MB copy=True decode are timed (tiny batches) and written as rows
    with their ratios to the 1 KB decode."""
    data = run_script("decode_scaling", ["--batch", "5", "--batches", "1"], tmp_path / "decode_scaling.json")
    check_envelope(data, "decode_scaling")
    assert [(r["case"], r["copy"]) for r in data["rows"]] == [
        ("1KB decode", False),
        ("64MB decode", False),
        ("64MB decode, copy=True", True),
    ]
    for row in data["rows"]:
        assert positive(row["us"]) and positive(row["ratio"]), row
    assert all(positive(data[k]) for k in ("1KB_us", "64MB_us", "ratio", "copy_64MB_us"))
    check_goals(data["goals"])
