"""CUDA IPC between two real processes through real dora dataflows (GPU only; `make test-gpu`).

The protocol itself is tested on every machine in tests/ipc/test_ipc_transport.py; these show the
device side: real segment handles and offsets, producer events across processes, caps, crashes.
In one process: tests/ipc/test_ipc_gpu.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.dora import python_node, run_dataflow, script_node, tail
from tests.support.paths import DORA_NODES

pytestmark = pytest.mark.gpu

PROBE = DORA_NODES / "ipc_probe.py"


def probe_flow(tmp_path: Path, scenario: str) -> tuple[list[dict], Path, Path]:
    produced, consumed = tmp_path / "producer.json", tmp_path / "consumer.json"
    nodes = [
        python_node(
            "producer",
            PROBE,
            inputs={"ready": "consumer/ready"},
            outputs=["data"],
            env={"ROLE": "producer", "SCENARIO": scenario, "REPORT": produced},
        ),
        python_node(
            "consumer",
            PROBE,
            inputs={"data": {"source": "producer/data", "queue_size": 1000}, "tick": "dora/timer/millis/100"},
            outputs=["ready"],
            env={"ROLE": "consumer", "SCENARIO": scenario, "REPORT": consumed},
        ),
    ]
    return nodes, produced, consumed


def run_probe(dora_cli, tmp_path, scenario, *, expect_ok=True):
    nodes, produced, consumed = probe_flow(tmp_path, scenario)
    proc = run_dataflow(dora_cli, tmp_path, nodes, timeout=240)
    if expect_ok:
        assert proc.returncode == 0, tail(proc)
    assert produced.exists(), tail(proc)
    return json.loads(produced.read_text()), (json.loads(consumed.read_text()) if consumed.exists() else None), proc


def test_hundreds_of_small_tensors_from_one_block_arrive_bit_exact(dora_cli, tmp_path):
    producer, consumer, _ = run_probe(dora_cli, tmp_path, "small")
    # On the H100 under 6 xdist workers, once: 279 of 300 (issue 37). What each side saw is in the
    # message, for the next run that loses some to say where they went (the producer's stats count
    # the messages it gave up unclaimed, `lost_on_the_way`: dora dropped them).
    seen = {k: consumer[k] for k in ("received", "missing", "after_close", "ended_by", "errors") if k in consumer}
    sent = {k: producer.get(k) for k in ("sent", "flushed", "flush_s", "stats")}
    assert consumer["received"] == 300 and consumer["bad"] == [] and consumer["errors"] == [], (seen, sent)
    assert producer["flushed"] and producer["stats"]["bytes_in_flight"] == 0
    # One segment opened for many messages (the handle cache), not one per message.
    assert consumer["receiver"]["segment_cache_misses"] < 30


def test_a_long_kernel_before_the_final_write_never_shows_stale_values(dora_cli, tmp_path):
    _, consumer, _ = run_probe(dora_cli, tmp_path, "race")
    assert consumer["received"] == 200, consumer["errors"][:3]
    assert consumer["bad"] == [], consumer["bad"][:5]


def test_small_messages_under_the_floor_arrive_on_the_gpu_as_host_bytes(dora_cli, tmp_path):
    """Issue 30, item 3: TC_IPC_MIN_BYTES=4096 in the producer; what is under it goes as host
    bytes and is restored onto the same GPU, bit-exact, in order with CUDA IPC messages and after
    the producer's kernels (the race trials alternate the two ways)."""
    producer, consumer, _ = run_probe(dora_cli, tmp_path, "floor")
    assert consumer["received"] == 350, consumer["errors"][:3]
    assert consumer["bad"] == [] and consumer["errors"] == [], (consumer["bad"][:3], consumer["errors"][:3])
    assert consumer["ways"] == {"host-to-gpu": 325, "cuda-ipc": 25}, consumer["ways"]
    assert producer["flushed"] and producer["stats"]["bytes_in_flight"] == 0


def test_a_slow_receiver_keeps_the_producer_under_its_cap(dora_cli, tmp_path):
    producer, consumer, _ = run_probe(dora_cli, tmp_path, "slow")
    # An error names a refusal ("message expired": the producer gave it up) rather than a loss.
    assert consumer["received"] == 40 and consumer["bad"] == [], (consumer["errors"][:3], consumer["bad"][:3])
    assert producer["stats"]["peak_bytes_in_flight"] <= producer["cap"]
    assert producer["stats"]["waits"] > 0  # the cap was actually reached
    assert producer["peak_allocated_over_baseline"] <= producer["cap"] + (2 << 20)


def test_a_receiver_that_dies_gives_the_producer_its_memory_back(dora_cli, tmp_path):
    producer, consumer, _ = run_probe(dora_cli, tmp_path, "crash", expect_ok=False)
    assert consumer is not None and consumer["received"] == 4  # written just before SIGKILL
    assert producer["allocated_while_held"] >= 4 * (16 << 20)
    assert producer["flushed"], producer
    assert producer["idle_after_flush"] >= 4 * (16 << 20), producer  # back in the pool, reusable
    assert producer["trimmed"] >= 4 and producer["allocated_after"] <= 0, producer


def test_suite_sender_to_receiver_over_cuda_ipc(dora_cli, tmp_path):
    """The stacked 0..11 case, every layout, every dtype, every TVTensor, PackedSequences and a
    nested detection sample, through the project's own sender and receiver nodes."""
    report_path = tmp_path / "report.json"
    nodes = [
        script_node(
            "sender",
            "tc-tensor-sender",
            inputs={"ack": {"source": "receiver/ack", "queue_size": 256}},
            outputs=["tensors"],
            env={"MODE": "suite", "DEVICE": "cuda", "TRANSPORT": "cuda-ipc"},
        ),
        script_node(
            "receiver",
            "tc-tensor-receiver",
            inputs={"suite": {"source": "sender/tensors", "queue_size": 256}},
            outputs=["ack"],
            env={"DEVICE": "cuda", "REPORT": report_path, "STRICT": 1},
        ),
    ]
    proc = run_dataflow(dora_cli, tmp_path, nodes, timeout=180)
    assert proc.returncode == 0, tail(proc)
    report = json.loads(report_path.read_text())
    assert report["ok"], json.dumps(report, indent=1)
    suite = report["inputs"]["suite"]
    assert suite["bad"] == 0 and suite["missing"] == 0 and suite["good"] == suite["expected"] > 0, suite
