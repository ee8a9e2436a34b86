"""bench/padding_check.py: tc.decode with the padding check against the same decode without it."""

from __future__ import annotations

from tests.support.bench import check_envelope, check_goals, positive, run_script


def test_padding_check_measures_every_message_with_and_without_the_check(tmp_path):
    """Each message of the script's CASES is decoded with and without the check (one round, one
    decode per batch) and written as a row with both times and their ratio; the check itself is
    back in place afterwards."""
    from tensor_codec.wire.buffer import Padding

    check = Padding.check
    data = run_script("padding_check", ["--rounds", "1", "--batch-leaves", "1"], tmp_path / "padding_check.json")
    assert Padding.check is check
    check_envelope(data, "padding_check")
    assert [(r["leaves"], r["leaf_bytes"]) for r in data["rows"]] == [
        (2, 3),
        (16, 1001),
        (256, 33),
        (1024, 1),
        (8, 1_000_001),
    ]
    for row in data["rows"]:
        assert positive(row["with_check_s"]) and positive(row["without_s"]) and positive(row["ratio"]), row
    check_goals(data["goals"])
