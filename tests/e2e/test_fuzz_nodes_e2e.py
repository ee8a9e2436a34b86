"""The node-level fuzzer (tools/fuzz_nodes, `make fuzz-nodes`, docs/fuzzing.md) at a small size:
hostile acks into tc-tensor-sender, tc-camera-source and the JPEG relays, hostile messages into
tc-tensor-receiver, tc-monitor, tc-jpeg-decoder, tc-jpeg-encoder and tc-jpeg-sink, each through a real dora
dataflow, each node's counts equal to what the hostile node sent. Run as `make` runs it (`python
-m tools.fuzz --nodes`, a subprocess), so the dispatch, the dataflows and the checks are all under
test; the summary JSON says what held.

The runner must also be able to fail: a hostile node that claims one more than it sent makes a
count differ, and the run must say MISMATCH and exit 1 (without that, a runner that compared
nothing would pass)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from tests.support.dora import ROOT, dora_env

pytestmark = pytest.mark.dora

# Well under the sizes of `make fuzz-nodes`: every category at least once, a short flood.
SMALL = ["--hostile", "40", "--flood-rate", "20000", "--real", "24", "--no-baseline"]
TIMEOUT_S = 300  # a busy machine runs dataflows slowly; this bounds a hang only


def fuzz_nodes(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m tools.fuzz --nodes ARGS --json --out tmp_path` -> (the process, its summary)."""
    where = ["--json", "--out", str(tmp_path), "--workdir", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-m", "tools.fuzz", "--nodes", *args, *where],
        cwd=ROOT,
        env=dora_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    summaries = list(tmp_path.glob("nodes-summary-*.json"))
    assert summaries, (
        f"no summary written (exit status {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return proc, json.loads(summaries[0].read_text())


def explain(summary: dict) -> str:
    return json.dumps(
        [{k: r[k] for k in ("label", "ok", "rows", "problems", "workdir")} for r in summary["results"]], indent=1
    )


def assert_passed(proc, summary: dict, targets: list[str]) -> None:
    assert proc.returncode == 0, explain(summary) + proc.stderr[-3000:]
    assert summary["ok"] and [r["label"] for r in summary["results"]] == targets, explain(summary)
    for result in summary["results"]:
        assert result["rows"] and all(row["ok"] for row in result["rows"]), explain(summary)
        # the node was really fed: every hostile row carries something, not 0 == 0
        fed = ("malformed ack", "bad message (report)", "bad message (monitor summary)", "bad JPEG", "bad frame")
        hostile = [row for row in result["rows"] if row["name"] in fed]
        assert hostile and all(row["sent"] > 0 for row in hostile), explain(summary)


def test_hostile_acks_and_messages_into_the_sender_and_the_receiver_are_all_counted(dora_cli, tmp_path):
    proc, summary = fuzz_nodes(tmp_path, "--targets", "sender,receiver", "--seed", "1", *SMALL)
    assert_passed(proc, summary, ["sender", "receiver"])
    sender = summary["results"][0]
    flood = sender["categories"]["flood: acks of a stream nothing sent"]
    stray = next(row for row in sender["rows"] if row["name"] == "ack of nothing in flight")
    assert flood > 0 and stray["counted"] > flood, stray  # the flood and the stray categories, each counted once


def test_hostile_messages_into_the_monitor_are_all_counted(dora_cli, tmp_path):
    proc, summary = fuzz_nodes(tmp_path, "--targets", "monitor", "--seed", "3", *SMALL)
    assert_passed(proc, summary, ["monitor"])
    described = next(row for row in summary["results"][0]["rows"] if row["name"].startswith("described"))
    assert described["sent"] > 0, described  # hostile messages it has no reason to refuse, shown as they are


@pytest.mark.slow
def test_hostile_acks_frames_and_jpegs_into_the_camera_and_the_jpeg_nodes_are_all_counted(dora_cli, tmp_path):
    targets = ["camera", "decoder", "encoder", "sink", "encoder-ack"]
    proc, summary = fuzz_nodes(tmp_path, "--targets", ",".join(targets), "--seed", "2", *SMALL)
    assert_passed(proc, summary, targets)


@pytest.mark.slow
def test_malformed_acks_into_the_jpeg_decoder_are_in_its_summary(dora_cli, tmp_path):
    proc, summary = fuzz_nodes(tmp_path, "--targets", "decoder-ack", "--seed", "3", *SMALL)
    assert_passed(proc, summary, ["decoder-ack"])


def test_the_runner_fails_when_a_count_does_not_match_what_was_sent(dora_cli, tmp_path):
    proc, summary = fuzz_nodes(
        tmp_path, "--targets", "receiver", "--miscount", "receiver:bad message", "--hostile", "20", "--real", "16"
    )
    assert proc.returncode == 1 and not summary["ok"], explain(summary)
    (result,) = summary["results"]
    mismatched = {row["name"]: (row["sent"], row["counted"]) for row in result["rows"] if not row["ok"]}
    sent, counted = mismatched["bad message (report)"]
    assert sent == counted + 1 and mismatched["bad message (refusal line)"] == (sent, counted), mismatched
    assert summary["kept"] == [result["workdir"]]  # the failed run's folder is kept for a look


def test_the_refusal_line_parser_reads_what_the_nodes_write():
    """counts.refusals against hostile.Refusals.summary itself and the line loop.run makes of it
    (the format both sides depend on)."""
    from tensor_codec_nodes.common.hostile import Refusals
    from tools.fuzz_nodes import counts

    refusals = Refusals(logging.getLogger("test"))
    for kind, n in (("ack_hostile: malformed ack", 12), ("tensors: bad message", 3), ("frames: TypeError", 1)):
        for _ in range(n):
            refusals.refuse(kind, "why")
    line = f"tensor-sender: WARNING {refusals.summary()}; peak RSS 738 MB"  # as loop.run logs it
    assert counts.peak_rss_mb(line) == 738
    assert counts.refusals(f"other lines\n{line}\nmore") == {
        "ack_hostile: malformed ack": 12,
        "tensors: bad message": 3,
        "frames: TypeError": 1,
    }
    assert counts.refusals("no refusal line") == {}
