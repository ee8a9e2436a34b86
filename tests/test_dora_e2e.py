"""End to end through real dora dataflows (`dora run`), from a directory outside the repo:
every layout, dtype, TVTensor class, PackedSequence and nested sample, a message larger than
dora's default pool, corrupted messages, and size errors raised inside a real node."""

from __future__ import annotations

import json

import pytest

from conftest import NODES, python_node, run_dataflow, tail

pytestmark = pytest.mark.dora
TESTS = NODES.parent / "tests"


def suite_flow(report, rounds=1, big_mb=24):
    return [
        python_node(
            "sender",
            NODES / "suite_sender.py",
            inputs={"tick": "dora/timer/millis/100", "ack": "receiver/ack"},
            outputs=["tensors", "done"],
            env={"ROUNDS": rounds, "BIG_MB": big_mb, "CORRUPT": 1},
            extra={"shared_memory_pool_size": "128MB"},
        ),
        python_node(
            "receiver",
            NODES / "suite_receiver.py",
            inputs={"tensors": {"source": "sender/tensors", "queue_size": 1000}, "done": "sender/done"},
            outputs=["ack"],
            env={"REPORT": report, "STRICT": 1},
        ),
    ]


def test_the_whole_suite_arrives_bit_exact_through_dora(dora_cli, tmp_path):
    from tensor_codec.testing import make_suite

    report_path = tmp_path / "report.json"
    proc = run_dataflow(dora_cli, tmp_path, suite_flow(report_path))
    assert proc.returncode == 0, tail(proc)
    report = json.loads(report_path.read_text())
    expected_good = len(make_suite()) + 2  # + the 24 MB tensor + the tensor mutated after sending
    assert report["ok"], report
    assert (report["good"], report["bad"], report["missing"], report["rejected"]) == (expected_good, 0, 0, 5), report
    assert set(report["by_kind"]) == {"layout", "dtype", "tv", "packed", "nested", "big", "mutated_after_send"}


def test_a_message_too_big_for_any_route_is_refused_inside_a_real_node(dora_cli, tmp_path):
    result = tmp_path / "result.json"
    node = python_node(
        "sender",
        TESTS / "dora_nodes" / "oversize_sender.py",
        inputs={"tick": "dora/timer/millis/50"},
        outputs=["out"],
        env={"MEGABYTES": 70, "RESULT": result},
    )
    proc = run_dataflow(dora_cli, tmp_path, [node])
    assert proc.returncode == 0, tail(proc)
    outcome = json.loads(result.read_text())
    assert outcome["raised"] == "MessageTooLargeError"
    assert "shared_memory_pool_size" in outcome["message"] and "'sender'" in outcome["message"]
