"""bench/ipc_collect.py at tiny sizes: both ways of collecting are timed at each count of messages
in flight, nothing held is collected, and the goal is judged."""

from __future__ import annotations

from tests.support.bench import check_envelope, check_goals, positive, run_script


def test_ipc_collect_times_both_ways_at_each_count(tmp_path):
    data = run_script("ipc_collect", ["--in-flight", "0,4", "--batches", "2"], tmp_path / "ipc_collect.json")
    check_envelope(data, "ipc_collect")
    assert [r["in_flight"] for r in data["rows"]] == [0, 4]
    for row in data["rows"]:
        assert positive(row["collect_us"]) and positive(row["full_look_us"]) and positive(row["ratio"]), row
    check_goals(data["goals"])
    assert len(data["goals"]) == 1 and data["goals"][0]["met"] in (True, False)
