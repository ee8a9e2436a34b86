"""Size errors raised inside a real dora node (`dora run`, from a directory outside the repo).
The suite itself travels through real dataflows in test_nodes_e2e.py."""

from __future__ import annotations

import json

import pytest

from tests.support.dora import ROOT, python_node, run_dataflow

pytestmark = pytest.mark.dora
TESTS = ROOT / "tests"


def test_a_message_too_big_for_any_route_is_refused_inside_a_real_node(dora_cli, tmp_path):
    result = tmp_path / "result.json"
    node = python_node(
        "sender",
        TESTS / "dora_nodes" / "oversize_sender.py",
        inputs={"tick": "dora/timer/millis/50"},
        outputs=["out"],
        env={"MEGABYTES": 70, "RESULT": result},
    )
    run = run_dataflow(dora_cli, tmp_path, [node])
    assert run.returncode == 0, run.explain()
    with run.explained():
        assert result.exists(), f"the sender wrote no result to {result}"
        outcome = json.loads(result.read_text())
        assert outcome["raised"] == "MessageTooLargeError", outcome
        assert "shared_memory_pool_size" in outcome["message"] and "'sender'" in outcome["message"], outcome


def test_metadata_text_dora_cannot_carry_is_refused_naming_its_field_inside_a_real_node(dora_cli, tmp_path):
    """tc.send leaves the metadata's values to dora, which refuses text UTF-8 cannot carry
    before it sends anything: tc names the field, on the full path (dora's send_output, and
    send_output_raw for two tensors) and on a stream's repeat; only the good message arrives."""
    result, arrived = tmp_path / "result.json", tmp_path / "arrived.json"
    sender = python_node(
        "sender",
        TESTS / "dora_nodes" / "unencodable_sender.py",
        inputs={"tick": "dora/timer/millis/50"},
        outputs=["out"],
        env={"RESULT": result},
    )
    receiver = python_node(
        "receiver", TESTS / "dora_nodes" / "metadata_recorder.py", inputs={"in": "sender/out"}, env={"RESULT": arrived}
    )
    run = run_dataflow(dora_cli, tmp_path, [sender, receiver])
    assert run.returncode == 0, run.explain()
    with run.explained():
        assert result.exists() and arrived.exists(), f"no result in {result} or {arrived}"
        outcome = json.loads(result.read_text())
        for name, field in (("first", "label"), ("raw", "label"), ("repeat", "names")):
            expected = f"EncodeError: metadata['{field}']: expected a value UTF-8 can carry"
            assert outcome[name].startswith(expected), outcome
        assert outcome["good"] == "sent", outcome
        assert json.loads(arrived.read_text()) == [{"keys": ["label"], "label": "fine"}]
