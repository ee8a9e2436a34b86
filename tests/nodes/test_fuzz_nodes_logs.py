"""How the node fuzzer (tools/fuzz_nodes) and the e2e tests read a dora node log: dora 1.1 reads a
node's stdout and stderr apart and writes each line as it comes, so a block one stream printed can
have the other's lines inside it. tc-monitor prints its summary table on stdout and its refusals on
stderr; a refusal that landed inside the table once made a CI run say "no summary table". Read by
stream, the table is whole whatever the interleaving. In process, on a log written as dora writes it."""

from __future__ import annotations

import json
import logging

import torch

import tensor_codec as tc
from tensor_codec_nodes.common.hostile import Refusals
from tensor_codec_nodes.monitor.monitor import Monitor
from tests.support.dora import _log_lines
from tools.fuzz_nodes import counts
from tools.fuzz_nodes.dora_run import DoraRun, log_lines

REFUSAL = "monitor: ERROR refused tensors: bad message: tc.header.version: expected 2, got 99"


def summary_table() -> str:
    """A real tc-monitor summary: 3 messages on `tensors`, 1 of them bad."""
    monitor = Monitor(["tensors"], refusals=Refusals(logging.getLogger("test-fuzz-nodes-logs")))
    value, metadata = tc.encode(torch.zeros(4))
    monitor.handle("tensors", value, metadata)
    monitor.handle("tensors", value, metadata)
    monitor.handle("tensors", value, {**metadata, "tc.header": "{"})
    return monitor.summary()


def dora_log(entries: list[tuple[str, str]]) -> str:
    """(stream, text) -> a node log as dora 1.1 writes it: a JSON object per line."""
    return "\n".join(
        json.dumps({"ts": "2026-12-02T00:00:00Z", "level": "stdout", "node": "monitor", "stream": s, "msg": m})
        for s, m in entries
    )


def interleaved(table: str) -> list[tuple[str, str]]:
    """The table on stdout, with a stderr refusal landed after its first line (as on CI)."""
    first, *rest = table.splitlines()
    return [("stderr", REFUSAL), ("stdout", first), ("stderr", REFUSAL)] + [("stdout", line) for line in rest]


def test_a_refusal_inside_the_monitor_table_hides_it_from_the_mixed_log_but_not_from_stdout(tmp_path):
    entries = interleaved(summary_table())
    run = DoraRun(tmp_path, 0, "", 0.0, None, {"monitor": log_lines(dora_log(entries))})
    assert counts.monitor_summary(run.log("monitor"), "tensors") is None  # the failure this guards against
    assert counts.monitor_summary(run.log("monitor", stream="stdout"), "tensors") == {"messages": 3, "bad": 1}
    assert run.log("monitor", stream="stderr") == f"{REFUSAL}\n{REFUSAL}"
    assert run.log("monitor").splitlines() == [text for _, text in entries]  # everything, in the log's order


def test_the_log_reader_keeps_each_lines_stream_and_lines_that_are_not_json():
    text = dora_log([("stdout", "a\nb"), ("stderr", "c")]) + "\nnot json\n" + json.dumps(["a list"])
    text += "\n" + json.dumps({"msg": "from dora itself"})
    assert log_lines(text) == [
        ("stdout", "a"),
        ("stdout", "b"),
        ("stderr", "c"),
        ("", "not json"),
        ("", '["a list"]'),
        ("", "from dora itself"),
    ]


def test_the_e2e_tests_read_a_node_log_by_stream_too(tmp_path):
    path = tmp_path / "log_monitor.jsonl"
    table = summary_table()
    entries = interleaved(table)
    path.write_text(dora_log(entries))
    assert _log_lines(path, "stdout") == table.splitlines()
    assert _log_lines(path) == [text for _, text in entries]
