"""One dataflow per target: the node under test with real traffic through it, a tc-tensor-receiver
that verifies that traffic (its JSON report), and the hostile node (node.py) wired to the input
under test.

Queues: every input that hostile traffic goes through holds all of it (hostile + real messages,
seconds of the flood, and a margin), and every input is on `queue_policy: backpressure` (see _queue), so
dora never drops one: a drop would make the node's count differ from what was sent for a reason
that is dora's, not the node's (the runner also looks for dora saying it dropped).

Producers resend after RETRY_S=60 and give up after 120 s: a resend would be acknowledged again
by the receiver, and that ack could be one more of nothing in flight than the hostile node sent
(the runner fails a run with any resend, saying so).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .dora_run import ROOT, find_script

__all__ = ["FlowParams", "UNDER_TEST", "build", "write_flow", "WINDOW"]

WINDOW = 8  # the producers' WINDOW (their default): hostile acks start past it (schedule.bursts)
MARGIN = 64
FLOOD_QUEUE_S = 4.0  # seconds of flood the hostile acker's input holds (10 x that with backpressure)


@dataclass(frozen=True)
class FlowParams:
    seed: int
    hostile: int  # hostile items
    flood_rate: int  # flood acks per second over the flood's span (ack targets)
    real: int  # real messages through the node under test
    workdir: Path
    miscount: str = ""  # the self-test: a bucket the hostile node over-claims

    @property
    def hostile_queue(self) -> int:
        """What the input the hostile acker feeds must hold: every hostile ack, every real one,
        and FLOOD_QUEUE_S of the flood (with backpressure dora holds 10 times that)."""
        return self.hostile + self.real + MARGIN + int(self.flood_rate * FLOOD_QUEUE_S)

    @property
    def report(self) -> Path:
        return self.workdir / "receiver-report.json"

    @property
    def result(self) -> Path:
        return self.workdir / "hostile.json"


# target -> (node id under test, its console script, the input the hostile node feeds)
UNDER_TEST = {
    "sender": ("sender", "tc-tensor-sender", "ack_hostile"),
    "camera": ("camera", "tc-camera-source", "ack_hostile"),
    "receiver": ("receiver", "tc-tensor-receiver", "tensors"),
    "decoder": ("decoder", "tc-jpeg-decoder", "jpeg"),
    "encoder": ("encoder", "tc-jpeg-encoder", "frames"),
    "sink": ("sink", "tc-jpeg-sink", "jpeg"),
    "monitor": ("monitor", "tc-monitor", "tensors"),
    "encoder-ack": ("encoder", "tc-jpeg-encoder", "ack_hostile"),
    "decoder-ack": ("decoder", "tc-jpeg-decoder", "ack_hostile"),
}

_PRODUCER = {"RETRY_S": "60", "ACK_TIMEOUT_S": "120", "WINDOW": str(WINDOW), "DEVICE": "cpu"}


def _script(node_id: str, script: str, inputs: dict, outputs: list[str], env: dict) -> dict:
    return {
        "id": node_id,
        "path": find_script(script),
        "inputs": inputs,
        "outputs": outputs,
        "env": {k: str(v) for k, v in env.items()},
    }


def _hostile(target: str, p: FlowParams, inputs: dict, outputs: list[str]) -> dict:
    env = {
        "TARGET": target,
        "SEED": p.seed,
        "HOSTILE": p.hostile,
        "FLOOD_RATE": p.flood_rate,
        "REAL": p.real,
        "WINDOW": WINDOW,
        "RESULT": p.result,
        "MISCOUNT": p.miscount,
        "PYTHONPATH": ROOT,
    }
    return {
        "id": "hostile",
        "path": sys.executable,
        "args": "-u -m tools.fuzz_nodes.node",
        "inputs": inputs,
        "outputs": outputs,
        "env": {k: str(v) for k, v in env.items()},
    }


def _receiver(inputs: dict, p: FlowParams) -> dict:
    # STRICT=0: hostile messages make the report's `bad` non-zero on purpose; the runner compares
    # the report's counts with what the hostile node sent (checks.py), and the exit status stays 0.
    env = {"DEVICE": "cpu", "REPORT": p.report, "PROGRESS_S": "0", "STRICT": "0"}
    return _script("receiver", "tc-tensor-receiver", inputs, ["ack"], env)


def _queue(source: str, size: int = MARGIN) -> dict:
    # backpressure: dora then carries the message on its daemon path, which holds the producer
    # while the queue is full; its direct path drops messages on a busy link (docs/delivery.md).
    # Without it, 1 to 10 of 4,000 acks never arrived in a run here, at random, some of them real.
    return {"source": source, "queue_size": size, "queue_policy": "backpressure"}


def _sender(p: FlowParams) -> list[dict]:
    """The sender's `ack_hostile` input: the hostile node acknowledges every message; the
    receiver beside it (`ack`) checks each arrived whole."""
    hostile_queue = p.hostile_queue
    env = {**_PRODUCER, "MODE": "random", "SIZES": "4KB", "COUNT": p.real, "RATE": "0", "SEED": p.seed}
    inputs = {"ack": _queue("receiver/ack"), "ack_hostile": _queue("hostile/ack", hostile_queue)}
    return [
        _script("sender", "tc-tensor-sender", inputs, ["tensors"], env),
        _receiver({"tensors": _queue("sender/tensors")}, p),
        _hostile("sender", p, {"data": _queue("sender/tensors")}, ["ack"]),
    ]


def _camera(p: FlowParams) -> list[dict]:
    hostile_queue = p.hostile_queue
    env = {**_PRODUCER, "WIDTH": "160", "HEIGHT": "120", "FPS": "0", "FRAMES": p.real}
    inputs = {"ack_receiver": _queue("receiver/ack"), "ack_hostile": _queue("hostile/ack", hostile_queue)}
    return [
        _script("camera", "tc-camera-source", inputs, ["image"], env),
        _receiver({"frames": _queue("camera/image")}, p),
        _hostile("camera", p, {"data": _queue("camera/image")}, ["ack"]),
    ]


def _receiver_target(p: FlowParams) -> list[dict]:
    """The receiver's `tensors` input: the hostile node's good and hostile messages; its `real`
    input: a tc-tensor-sender's, acknowledged, which must all arrive good meanwhile."""
    data_queue = p.hostile + p.real + MARGIN
    ack_queue = 2 * p.real + p.hostile + MARGIN  # every ack the receiver sends (both senders' and duplicates')
    env = {**_PRODUCER, "MODE": "random", "SIZES": "4KB", "COUNT": p.real, "RATE": "0", "SEED": p.seed}
    return [
        _hostile("receiver", p, {"ack": _queue("receiver/ack", ack_queue)}, ["tensors"]),
        _script("real-sender", "tc-tensor-sender", {"ack": _queue("receiver/ack", ack_queue)}, ["tensors"], env),
        _receiver({"tensors": _queue("hostile/tensors", data_queue), "real": _queue("real-sender/tensors")}, p),
    ]


def _decoder(p: FlowParams) -> list[dict]:
    """The decoder's `jpeg` input: the hostile node's good and hostile JPEGs; its frames go to a
    receiver that rebuilds each good one and compares it within JPEG's bounds."""
    jpeg_queue = p.hostile + p.real + MARGIN
    inputs = {"jpeg": _queue("hostile/jpeg", jpeg_queue), "ack": _queue("receiver/ack")}
    return [
        _hostile("decoder", p, {"ack": _queue("decoder/ack", p.real + MARGIN)}, ["jpeg"]),
        _script("decoder", "tc-jpeg-decoder", inputs, ["image", "ack"], {**_PRODUCER}),
        _receiver({"decoded": _queue("decoder/image")}, p),
    ]


def _encoder(p: FlowParams) -> list[dict]:
    """The encoder's `frames` input: the hostile node's good and hostile frames; its JPEGs go
    through a decoder to a receiver that rebuilds each good frame and compares it."""
    frames_queue = p.hostile + p.real + MARGIN
    return [
        _hostile("encoder", p, {"ack": _queue("encoder/ack", p.real + MARGIN)}, ["frames"]),
        _script(
            "encoder",
            "tc-jpeg-encoder",
            {"frames": _queue("hostile/frames", frames_queue), "ack_decoder": _queue("decoder/ack")},
            ["jpeg", "ack"],
            {**_PRODUCER},
        ),
        _script(
            "decoder",
            "tc-jpeg-decoder",
            {"jpeg": _queue("encoder/jpeg"), "ack_receiver": _queue("receiver/ack")},
            ["image", "ack"],
            {**_PRODUCER},
        ),
        _receiver({"decoded": _queue("decoder/image")}, p),
    ]


SINK_SAVES = 3  # the JPEG sink's COUNT: the first 3 accepted are written to files


def _sink(p: FlowParams) -> list[dict]:
    """The JPEG sink's `jpeg` input: the hostile node's good and hostile JPEGs, acknowledged."""
    jpeg_queue = p.hostile + p.real + MARGIN
    env = {"DIR": p.workdir / "jpeg", "COUNT": SINK_SAVES}
    return [
        _hostile("sink", p, {"ack": _queue("sink/ack", p.real + MARGIN)}, ["jpeg"]),
        _script("sink", "tc-jpeg-sink", {"jpeg": _queue("hostile/jpeg", jpeg_queue)}, ["ack"], env),
    ]


def _monitor(p: FlowParams) -> list[dict]:
    """The monitor's `tensors` input: the hostile node's good and hostile tensor_codec messages
    (the receiver target's), which a tc-tensor-receiver beside it acknowledges (the monitor never
    does) and verifies."""
    data_queue = p.hostile + p.real + MARGIN
    receiver = _receiver({"tensors": _queue("hostile/tensors", data_queue)}, p)
    receiver["env"]["STRICT"] = "0"  # it gets hostile messages on purpose: its report says what was wrong
    return [
        _hostile("monitor", p, {"ack": _queue("receiver/ack", p.real + p.hostile + MARGIN)}, ["tensors"]),
        receiver,
        _script("monitor", "tc-monitor", {"tensors": _queue("hostile/tensors", data_queue)}, [], {"PERIOD_S": "0"}),
    ]


def _jpeg_chain(p: FlowParams, relay: str) -> list[dict]:
    """camera -> tc-jpeg-encoder -> tc-jpeg-decoder -> receiver, every link acknowledged; the
    hostile node is one more consumer of `relay` (encoder or decoder), acknowledging its output on
    the relay's `ack_hostile` input, hostile acks between."""
    hostile_queue = p.hostile_queue
    output = {"encoder": "jpeg", "decoder": "image"}[relay]
    camera_env = {**_PRODUCER, "WIDTH": "320", "HEIGHT": "240", "FPS": "0", "FRAMES": p.real}
    inputs = {
        "encoder": {"frames": _queue("camera/image"), "ack_decoder": _queue("decoder/ack")},
        "decoder": {"jpeg": _queue("encoder/jpeg"), "ack_receiver": _queue("receiver/ack")},
    }
    inputs[relay]["ack_hostile"] = _queue("hostile/ack", hostile_queue)
    encoder_inputs, decoder_inputs = inputs["encoder"], inputs["decoder"]
    return [
        _script("camera", "tc-camera-source", {"ack_encoder": _queue("encoder/ack")}, ["image"], camera_env),
        _script("encoder", "tc-jpeg-encoder", encoder_inputs, ["jpeg", "ack"], {**_PRODUCER}),
        _script("decoder", "tc-jpeg-decoder", decoder_inputs, ["image", "ack"], {**_PRODUCER}),
        _receiver({"decoded": _queue("decoder/image")}, p),
        _hostile(f"{relay}-ack", p, {"data": _queue(f"{relay}/{output}")}, ["ack"]),
    ]


_BUILDERS = {
    "sender": _sender,
    "camera": _camera,
    "receiver": _receiver_target,
    "decoder": _decoder,
    "encoder": _encoder,
    "sink": _sink,
    "monitor": _monitor,
    "encoder-ack": lambda p: _jpeg_chain(p, "encoder"),
    "decoder-ack": lambda p: _jpeg_chain(p, "decoder"),
}


def build(target: str, p: FlowParams) -> list[dict]:
    if target not in _BUILDERS:
        raise ValueError(f"target: expected one of {', '.join(_BUILDERS)}, got {target!r}")
    return _BUILDERS[target](p)


def write_flow(target: str, p: FlowParams) -> Path:
    """The dataflow file (JSON is YAML) in p.workdir."""
    p.workdir.mkdir(parents=True, exist_ok=True)
    flow = p.workdir / "dataflow.yml"
    flow.write_text(json.dumps({"nodes": build(target, p)}, indent=1))
    return flow
