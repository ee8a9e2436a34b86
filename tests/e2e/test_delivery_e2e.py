"""Delivery through real dora dataflows: what dora 1.1 drops, and what the acknowledged links of
the default pipeline (dataflow.yml) deliver anyway.

dora 1.1 drops the oldest queued message of an input past `queue_size` (or past 10 x queue_size,
at least 100, with `queue_policy: backpressure`). The default pipeline's producers (camera, tensor
senders, JPEG encoder and decoder) each keep a window of unacknowledged messages, so a slow
consumer slows them down instead. These tests make the receiver slow and check, from its report
(counts, checksums, frames rebuilt and compared), that nothing was lost on any link, next to
unacknowledged controls in the same dataflow that do lose messages, and that a producer whose
consumer dies exits non-zero saying how many messages were not acknowledged. Resends never put
more copies in a consumer's queue than it holds (dora discards nothing, on a host kept busy, but
the one copy a probe of a consumer silent for over a second may cost), and a producer whose
WINDOW does not fit that queue refuses to start.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
import yaml

from tests.support.dora import ROOT, run_flow_file, tail
from tests.support.load import cpu_hog

pytestmark = pytest.mark.dora

SLOW_RECEIVER = ROOT / "tests" / "dora_nodes" / "slow_receiver.py"
FALSE_ACKER = ROOT / "tests" / "dora_nodes" / "false_acker.py"
QUEUE = 10  # queue_size of every data input in the slow-consumer test: hard cap 100 with backpressure
FRAMES = 150  # camera frames, as many JPEGs and decoded frames
LOAD = 150  # the load sender's messages (4 KB each, as fast as the window allows)
CONTROL = 250  # the unacknowledged control sender's messages


def slow_receiver(node: dict, **env) -> dict:
    """`node` (a tc-tensor-receiver entry) run through tests/dora_nodes/slow_receiver.py."""
    node = dict(node)
    node["path"] = sys.executable
    node["args"] = f"-u {SLOW_RECEIVER}"
    node["env"] = {**node.get("env", {}), **{k: str(v) for k, v in env.items()}}
    return node


def by_id(flow: dict) -> dict[str, dict]:
    return {node["id"]: node for node in flow["nodes"]}


DORA_DROP = re.compile(r"input `([\w-]+)` hit hard cap|Discarding event for input `([\w-]+)`")


def assert_dora_dropped_only_past_probes(flow: dict, log: str, inputs) -> None:
    """dora discarded no copy on those inputs, but for the one copy a probe may cost (the module
    docstring of nodes/common/delivery.py: a consumer silent for over PROBE_MIN_S with its queue
    counted full gets one resend anyway, and dora may drop its oldest queued copy, which a later
    resend makes good). So each input's drops are at most the probes its producer made. On the
    GPU host under 14 xdist workers the rerun sink fell silent that long once, and dora dropped
    one copy on its `suite` after one of 2 probes (issue 37); nothing was lost."""
    producers = {
        name: spec["source"].split("/")[0]
        for node in flow["nodes"]
        for name, spec in (node.get("inputs") or {}).items()
        if isinstance(spec, dict) and "/" in str(spec.get("source"))
    }
    drops: dict[str, int] = {}
    for m in DORA_DROP.finditer(log):
        name = m.group(1) or m.group(2)
        drops[name] = drops.get(name, 0) + 1
    for name in inputs:
        if not drops.get(name):
            continue
        producer = producers[name]
        found = re.findall(rf"{re.escape(producer)}: .*?(\d+) probes of a silent consumer", log)
        probes = max((int(n) for n in found), default=0)  # its one summary line (printed once or more)
        assert drops[name] <= probes, f"dora dropped {drops[name]} on `{name}`, {producer} made {probes} probes"


def test_default_pipeline_loses_nothing_behind_a_slow_consumer_where_dora_drops(dora_cli, tmp_path):
    """dataflow.yml as shipped (every node, every link and its queue policy), with the receiver
    taking 10 ms more per message, the camera and the load sender as fast as they can go, small
    frames, and every data input's queue_size cut to QUEUE: 150 frames, 150 JPEGs and 150 tensors
    each exceed even backpressure's hard cap (10 x QUEUE). An unacknowledged control sender into
    the same receiver, on an input with `queue_policy: backpressure` and the same queue_size,
    loses messages (dora drops them); the pipeline's own links lose none."""
    flow = yaml.safe_load((ROOT / "dataflow.yml").read_text())
    nodes = by_id(flow)
    nodes["camera"]["env"].update({"WIDTH": "320", "HEIGHT": "240", "FPS": "0", "FRAMES": str(FRAMES)})
    nodes["load-sender"]["env"].update({"SIZES": "4KB", "COUNT": str(LOAD), "RATE": "0"})
    for node in flow["nodes"]:
        for name, spec in (node.get("inputs") or {}).items():
            if not name.startswith("ack"):
                assert isinstance(spec, dict), (node["id"], name, spec)
                spec["queue_size"] = QUEUE
    receiver = slow_receiver(nodes["receiver"], SLOW_MS=10, STRICT=0, PROGRESS_S=0)
    receiver["inputs"]["control"] = {
        "source": "control-sender/tensors",
        "queue_size": QUEUE,
        "queue_policy": "backpressure",
    }
    flow["nodes"] = [n for n in flow["nodes"] if n["id"] != "receiver"] + [
        receiver,
        {
            "id": "control-sender",
            "path": "tc-tensor-sender",
            "outputs": ["tensors"],
            "env": {"MODE": "random", "SIZES": "4KB", "COUNT": str(CONTROL), "RATE": "0", "SEED": "1"},
        },
    ]
    path = tmp_path / "dataflow.yml"
    path.write_text(yaml.safe_dump(flow, sort_keys=False))

    proc = run_flow_file(dora_cli, path, timeout=240)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, tail(proc)
    report = json.loads((tmp_path / "out" / "receiver-report.json").read_text())
    inputs = report["inputs"]
    print(
        json.dumps(
            {
                name: {k: s[k] for k in ("expected", "received", "good", "missing", "duplicates")}
                for name, s in inputs.items()
            }
        )
    )
    print("\n".join(line for line in log.splitlines() if "acknowledged, " in line or "tensor sender: " in line))

    # The pipeline's links: every message, each verified (checksums; frames rebuilt and
    # compared byte for byte, decoded ones within JPEG's bounds).
    for name in ("frames", "decoded", "suite", "load"):
        stats = inputs[name]
        assert stats["bad"] == 0 and stats["missing"] == 0, (name, stats)
        assert stats["received"] == stats["expected"] and stats["good"] + stats["rejected"] == stats["received"], (
            name,
            stats,
        )
    assert inputs["frames"]["good"] == FRAMES and inputs["frames"]["unverified"] == 0
    assert inputs["decoded"]["good"] == FRAMES and inputs["decoded"]["unverified"] == 0
    assert inputs["load"]["good"] == LOAD and inputs["suite"]["rejected"] == 5
    assert f"received {FRAMES}, encoded {FRAMES}, bad 0, failed 0" in log, tail(
        proc
    )  # the encoder took every frame once
    assert f"received {FRAMES}, decoded {FRAMES}, bad 0" in log, tail(proc)  # the decoder every JPEG once
    assert f"jpeg-sink: INFO received {FRAMES}, saved 5 to out/jpeg, bad 0" in log, tail(proc)
    assert_dora_dropped_only_past_probes(flow, log, ("frames", "decoded", "suite", "load", "jpeg"))

    # The control: dora dropped most of it (what the acks prevent), though it was on backpressure.
    control = inputs["control"]
    assert control["expected"] == CONTROL and control["bad"] == 0, control
    assert control["missing"] > 0 and control["received"] + control["missing"] == CONTROL, control
    assert f"Backpressure input `control` hit hard cap ({max(10 * QUEUE, 100)}), dropping oldest" in log


def test_producers_whose_consumer_dies_exit_non_zero_and_say_how_many_were_not_acknowledged(dora_cli, tmp_path):
    """A tensor sender and a camera, both acknowledged by a receiver that dies (os._exit) after
    30 messages: each stops, logs how many of its messages were not acknowledged and exits 1,
    and dora reports each as failed."""
    flow = {
        "nodes": [
            {
                "id": "sender",
                "path": "tc-tensor-sender",
                "outputs": ["tensors"],
                "inputs": {"ack": {"source": "receiver/ack", "queue_size": 64}},
                "env": {"MODE": "random", "SIZES": "4KB", "COUNT": "200", "DEVICE": "cpu"},
            },
            {
                "id": "camera",
                "path": "tc-camera-source",
                "outputs": ["image"],
                "inputs": {"ack_receiver": {"source": "receiver/ack", "queue_size": 256}},
                "env": {"WIDTH": "320", "HEIGHT": "240", "FPS": "0", "FRAMES": "100", "DEVICE": "cpu"},
            },
            slow_receiver(
                {
                    "id": "receiver",
                    "path": "tc-tensor-receiver",
                    "outputs": ["ack"],
                    "inputs": {
                        "tensors": {"source": "sender/tensors", "queue_size": 64},
                        "frames": {"source": "camera/image", "queue_size": 64},
                    },
                    "env": {"DEVICE": "cpu", "PROGRESS_S": "0"},
                },
                SLOW_MS=5,
                DIE_AFTER=30,
            ),
        ]
    }
    path = tmp_path / "dataflow.yml"
    path.write_text(json.dumps(flow, indent=1))

    proc = run_flow_file(dora_cli, path, timeout=180)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, tail(proc)
    assert "Node `receiver` failed: exited with code 3" in log, tail(proc)
    assert "Node `sender` failed: exited with code 1" in log, tail(proc)
    assert "Node `camera` failed: exited with code 1" in log, tail(proc)
    sender = re.search(r"tensor-sender: ERROR (\d+) of 200 messages not acknowledged \(first: seq \d+\)", log)
    camera = re.search(r"camera-source: ERROR (\d+) of 100 frames not acknowledged", log)
    assert sender and camera, tail(proc)
    n_sender, n_camera = int(sender.group(1)), int(camera.group(1))
    print(f"not acknowledged: sender {n_sender} of 200, camera {n_camera} of 100")
    # The receiver handled (and acknowledged) at most 30 messages of the 300 before it died.
    assert n_sender <= 200 and n_camera <= 100 and n_sender + n_camera >= 300 - 30
    assert "ack closed: that receiver went away" in log and "ack_receiver closed: that consumer went away" in log


def false_acker(node_id: str, source: str, mode: str) -> dict:
    return {
        "id": node_id,
        "path": sys.executable,
        "args": f"-u {FALSE_ACKER}",
        "inputs": {"data": {"source": source, "queue_size": 64}},
        "outputs": ["ack"],
        "env": {"MODE": mode},
    }


def test_producers_whose_consumer_acknowledges_wrongly_never_wedge_they_end_saying_what_was_lost(dora_cli, tmp_path):
    """Issue 60: a tensor sender whose consumer stays alive but stops acknowledging sent 24 of
    40 and then nothing, neither ending nor logging, until dora stopped the dataflow; one whose
    consumer echoes a stale tx (0) sent 10 of 40 and did the same. A camera beside them, its
    consumer echoing tx 0, gets no frame counted delivered by such acks. Each now keeps
    transmitting (probes, resends, new messages) and, with ACK_TIMEOUT_S of a few seconds, gives
    up what is not acknowledged and exits 1 saying how many, in seconds.

    The quiet sender's 24 acknowledged messages must each be acknowledged within its
    ACK_TIMEOUT_S of being made: on a loaded 2-core CI host one of them was not within 2 s (23
    of 24 counted; its ack lost or late, and the acker then silent to the resend), nor within
    6 s at a load average of 10. Its acker now acknowledges every copy of those 24 (as
    tc-tensor-receiver does) and it gets 10 s; the others, whose every message is to be given
    up, 2 s. Which 24 it acknowledged is dora's order of delivery, so the acker names them and the
    sender's "first" is checked against that."""
    producer = {"DEVICE": "cpu", "RETRY_S": "0.2", "ACK_TIMEOUT_S": "2"}
    sender_env = {**producer, "MODE": "random", "SIZES": "4KB", "COUNT": "40", "RATE": "0"}

    def sender(node_id: str, acker: str, ack_timeout_s: str = "2") -> dict:
        return {
            "id": node_id,
            "path": "tc-tensor-sender",
            "outputs": ["tensors"],
            "inputs": {"ack": {"source": f"{acker}/ack", "queue_size": 64}},
            "env": {**sender_env, "ACK_TIMEOUT_S": ack_timeout_s},
        }

    flow = {
        "nodes": [
            sender("quiet-sender", "stops", ack_timeout_s="10"),
            false_acker("stops", "quiet-sender/tensors", "stop_after:24"),
            sender("echoed-sender", "stale"),
            false_acker("stale", "echoed-sender/tensors", "tx:0"),
            {
                "id": "camera",
                "path": "tc-camera-source",
                "outputs": ["image"],
                "inputs": {"ack": {"source": "stale-camera/ack", "queue_size": 64}},
                "env": {**producer, "WIDTH": "160", "HEIGHT": "120", "FPS": "0", "FRAMES": "30"},
            },
            false_acker("stale-camera", "camera/image", "tx:0"),
        ]
    }
    path = tmp_path / "dataflow.yml"
    path.write_text(json.dumps(flow, indent=1))
    proc = run_flow_file(dora_cli, path, timeout=150)
    log = proc.stdout + proc.stderr
    for node_id in ("quiet-sender", "echoed-sender", "camera"):
        assert f"Node `{node_id}` failed: exited with code 1" in log, tail(proc)
    # Which 24 were acknowledged is dora's order of delivery (the first 24 the acker took: on a
    # loaded host one of 0-23 reached it only after 24 others); the sender must name exactly the
    # first of the rest.
    acker = re.search(r"false acker \(stop_after:24\): .* acknowledged seqs \[([\d,]*)\]", log)
    assert acker, tail(proc)
    acknowledged = {int(seq) for seq in acker.group(1).split(",") if seq}
    assert len(acknowledged) == 24, acker.group(0)
    first = min(set(range(40)) - acknowledged)
    assert re.search(rf"quiet-sender: .*ERROR 16 of 40 messages not acknowledged \(first: seq {first}\)", log), (
        acker.group(0) + "\n" + tail(proc)
    )
    assert re.search(r"echoed-sender: .*ERROR 40 of 40 messages not acknowledged \(first: seq 0\)", log), tail(proc)
    assert re.search(r"camera: .*ERROR 30 of 30 frames not acknowledged", log), tail(proc)
    assert re.search(r"tensor sender: 40 messages sent, 24 acknowledged, 16 not acknowledged", log), tail(proc)
    assert re.search(r"40 messages sent, 0 acknowledged, 40 not acknowledged.* acks naming a copy never sent", log)


OVERFILL_COUNT = 100  # the sender's messages in the overfill test


def test_resends_never_put_more_copies_in_a_consumers_queue_than_it_holds(dora_cli, tmp_path):
    """The defect seen on a loaded host: a tensor sender with its default WINDOW of 8 and a short
    RETRY_S, feeding a slow receiver on an input with queue_size 10 and no backpressure. The 8
    messages the window allows sit in that queue longer than RETRY_S, so each is resent while its
    first copy is still queued: 8 + 8 copies for a queue of 10, and dora discarded the oldest
    ("Discarding event for input `tensors`"; the acks resent it, so nothing was lost, but the link
    was not what it claims). With transmissions bounded by what the consumer's queue holds (the
    acks echo each copy's `tx`), dora never has to discard, and every message arrives, verified,
    beside two processes that keep the CPUs busy."""
    flow = {
        "nodes": [
            {
                "id": "sender",
                "path": "tc-tensor-sender",
                "outputs": ["tensors"],
                "inputs": {"ack": {"source": "receiver/ack", "queue_size": 256}},
                "env": {
                    "MODE": "random",
                    "SIZES": "4KB",
                    "COUNT": str(OVERFILL_COUNT),
                    "RATE": "0",
                    "DEVICE": "cpu",
                    "WINDOW": "8",
                    "RETRY_S": "0.05",
                },
            },
            slow_receiver(
                {
                    "id": "receiver",
                    "path": "tc-tensor-receiver",
                    "outputs": ["ack"],
                    "inputs": {"tensors": {"source": "sender/tensors", "queue_size": 10}},
                    "env": {"DEVICE": "cpu", "PROGRESS_S": "0", "REPORT": "out/receiver-report.json"},
                },
                SLOW_MS=10,
            ),
        ]
    }
    path = tmp_path / "dataflow.yml"
    path.write_text(json.dumps(flow, indent=1))

    with cpu_hog(2):
        proc = run_flow_file(dora_cli, path, timeout=120)
    log = proc.stdout + proc.stderr
    print("\n".join(line for line in log.splitlines() if "tensor sender: " in line or "Discarding" in line)[:3000])
    assert proc.returncode == 0, tail(proc)
    stats = json.loads((tmp_path / "out" / "receiver-report.json").read_text())["inputs"]["tensors"]
    assert stats["expected"] == OVERFILL_COUNT and stats["received"] == OVERFILL_COUNT, stats
    assert stats["good"] == OVERFILL_COUNT and stats["missing"] == 0 and stats["bad"] == 0, stats
    assert f"tensor sender: {OVERFILL_COUNT} messages sent" in log and ", 0 not acknowledged" in log, tail(proc)
    discards = re.findall(r"Discarding event for input .tensors.", log)
    assert not discards, f"dora discarded {len(discards)} queued messages of the acknowledged link\n{tail(proc)}"


def test_a_producer_whose_window_does_not_fit_its_consumers_queue_refuses_to_start(dora_cli, tmp_path):
    """WINDOW 8 against a consumer input with queue_size 4 (no backpressure: 4 messages): the
    sender, reading the queue from dora's own descriptor, exits 2 at start naming the input, its
    queue and the two cures, and sends nothing."""
    flow = {
        "nodes": [
            {
                "id": "sender",
                "path": "tc-tensor-sender",
                "outputs": ["tensors"],
                "inputs": {"ack": {"source": "receiver/ack", "queue_size": 256}},
                "env": {"MODE": "random", "SIZES": "4KB", "COUNT": "5", "DEVICE": "cpu"},
            },
            {
                "id": "receiver",
                "path": "tc-tensor-receiver",
                "outputs": ["ack"],
                "inputs": {"tensors": {"source": "sender/tensors", "queue_size": 4}},
                "env": {"DEVICE": "cpu", "PROGRESS_S": "0"},
            },
        ]
    }
    path = tmp_path / "dataflow.yml"
    path.write_text(json.dumps(flow, indent=1))
    proc = run_flow_file(dora_cli, path, timeout=120)
    log = proc.stdout + proc.stderr
    assert "Node `sender` failed: exited with code 2" in log, tail(proc)
    assert (
        "WINDOW=8 does not fit the queue of receiver/tensors, wired to output `tensors` and acknowledged on `ack`: "
        "queue_size 4, queue_policy drop_oldest (dora's default) holds 4 messages" in log
    ), tail(proc)
    assert "Raise that input's queue_size to at least 8, or set WINDOW to at most 4." in log, tail(proc)
