"""The two nodes of bench/cuda_ipc.py (role from argv). One message in flight at a time (the
receiver acks each). Latency = receiver's `monotonic_ns` once the tensor is usable on its GPU
(stream synchronized) minus the sender's just before it started preparing the message.

Codec overhead: the sender times `tc.send` minus the time inside dora's `send_output`; the
receiver times `tc.receive` (claim, cached segment, event wait queued, views)."""

from __future__ import annotations

import json
import os
import sys
import time

import pyarrow as pa
import torch
from dora import Node

import tensor_codec as tc

KB = 1 << 10


class TimedNode:
    """Passes everything to dora's node, timing `send_output` (dora's own share of a send)."""

    def __init__(self, node):
        self._node = node
        self.in_dora_ns = 0

    def send_output(self, *args, **kwargs):
        start = time.perf_counter_ns()
        try:
            return self._node.send_output(*args, **kwargs)
        finally:
            self.in_dora_ns += time.perf_counter_ns() - start

    def __getattr__(self, name):
        return getattr(self._node, name)


def send(node: TimedNode, contender: str, tensor: torch.Tensor, metadata: dict) -> int:
    metadata["t0"] = time.monotonic_ns()
    if contender == "cuda-ipc":
        node.in_dora_ns = 0
        start = time.perf_counter_ns()
        tc.send(node, "out", tensor, metadata, transport="cuda-ipc")
        return time.perf_counter_ns() - start - node.in_dora_ns
    tc.send(node._node, "out", tensor.cpu(), metadata)  # today's way: through the host
    return 0


def run_sender() -> None:
    plan = json.loads(os.environ["PLAN"])
    node = TimedNode(Node())
    device = torch.device("cuda", 0)
    tensors = {size: torch.randn(size * KB // 4, device=device) for size in plan["sizes_kb"]}
    queue = []
    for size in plan["sizes_kb"]:
        for rep in range(plan["warmup"] + plan["reps"]):
            for contender in plan["contenders"]:
                queue.append((contender, size, rep < plan["warmup"]))
    codec = []
    seq, waiting_since = 0, None
    for event in node:
        if event["type"] != "INPUT":
            continue
        if event["id"] == "ack" or (waiting_since is not None and time.monotonic() - waiting_since > 3.0):
            waiting_since = None
        if waiting_since is None:
            if seq == len(queue):
                break
            contender, size, warmup = queue[seq]
            spent = send(
                node, contender, tensors[size], {"seq": seq, "contender": contender, "size_kb": size, "warmup": warmup}
            )
            if contender == "cuda-ipc" and not warmup:
                codec.append({"size_kb": size, "send_codec_ns": spent})
            seq += 1
            waiting_since = time.monotonic()
    tc.ipc_flush(10)
    with open(os.environ["SENDER_RESULTS"], "w") as f:
        json.dump(codec, f)
    node.send_output("done", pa.array([0], pa.int64()))


def run_receiver() -> None:
    node = Node()
    device = torch.device("cuda", 0)
    results = []
    for event in node:
        if event["type"] != "INPUT":
            continue
        if event["id"] == "done":
            break
        metadata = event["metadata"]
        with tc.scope():
            start = time.perf_counter_ns()
            tensor = tc.receive(event)
            decode_ns = time.perf_counter_ns() - start
            if tensor.device.type != "cuda":
                tensor = tensor.to(device)
            torch.cuda.current_stream(device).synchronize()
            t1 = time.monotonic_ns()
            if not metadata["warmup"]:
                results.append(
                    {
                        "contender": metadata["contender"],
                        "size_kb": metadata["size_kb"],
                        "latency_ns": t1 - metadata["t0"],
                        "receive_codec_ns": decode_ns,
                    }
                )
            del tensor
        node.send_output("ack", pa.array([], pa.uint8()), {"seq": metadata["seq"]})
    with open(os.environ["RESULTS"], "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    {"sender": run_sender, "receiver": run_receiver}[sys.argv[1]]()
