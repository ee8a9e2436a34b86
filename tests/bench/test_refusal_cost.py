"""bench/refusal_cost.py: every hostile input of make fuzz-nodes' categories, timed in the node's
own code against a good message."""

from __future__ import annotations

from tests.support.bench import check_envelope, check_goals, positive, run_script
from tests.support.jpeg import TORCHVISION_DEPRECATED


@TORCHVISION_DEPRECATED  # the hostile JPEGs' good source frames (tools/fuzz_nodes/forge.py) come from encode_jpeg
def test_refusal_cost_times_every_hostile_input_and_each_is_refused(tmp_path):
    data = run_script("refusal_cost", ["--reps", "1"], tmp_path / "refusal_cost.json")
    check_envelope(data, "refusal_cost")
    rows = data["rows"]
    nodes = {r["node"] for r in rows}
    assert nodes == {"tc-jpeg-decoder", "tc-tensor-receiver", "an acknowledged output (Outbox)"}
    assert len(rows) > 50 and any("1 MB" in r["case"] for r in rows)
    for row in rows:
        assert row["refused"], row  # a hostile input the node took as good: the categories or the node changed
        assert positive(row["seconds"]) and positive(row["good_seconds"]) and positive(row["ratio"]), row
    assert data["worst"]["seconds"] == max(r["seconds"] for r in rows)
    check_goals(data["goals"])
