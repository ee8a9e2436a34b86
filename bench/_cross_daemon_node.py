"""The nodes of bench/cross_daemon.py (role from ROLE): a sender on machine A with two outputs,
`local` (to a receiver on A, same daemon) and `remote` (to a receiver on B, another daemon), and
the receivers, which restore each message with tc.receive (onto DEVICE) and ack it.

Per size, the two paths take turns: latency rounds (one message in flight) and throughput runs
(a stream of messages, WINDOW in flight, acked; MB/s from the first send to the last ack).
Latency = the receiver's monotonic_ns once the tensor is usable minus the sender's just before
it started sending (one host, one clock). The sender writes everything to RESULTS."""

from __future__ import annotations

import json
import os
import sys
import time

import pyarrow as pa
import torch
from dora import Node

import tensor_codec as tc

MB = 1 << 20
ACK_TIMEOUT_S = 10.0


class Sender:
    def __init__(self, node: Node):
        self.node = node
        self.seq = 0
        self.acked: dict[int, int] = {}  # seq -> receiver's monotonic_ns

    def pump(self, timeout: float) -> None:
        event = self.node.next(timeout=timeout)
        if event is not None and event["type"] == "INPUT" and event["id"].startswith("ack"):
            self.acked[event["metadata"]["seq"]] = event["metadata"]["usable_ns"]

    def send(self, output: str, tensor: torch.Tensor) -> tuple[int, int]:
        seq, self.seq = self.seq, self.seq + 1
        t0 = time.monotonic_ns()
        tc.send(self.node, output, tensor, {"seq": seq})
        return seq, t0

    def wait(self, seqs, deadline_s: float = ACK_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + deadline_s
        while any(s not in self.acked for s in seqs):
            if time.monotonic() > deadline:
                return False
            self.pump(0.05)
        return True

    def latency_ms(self, output: str, tensor: torch.Tensor) -> float | None:
        seq, t0 = self.send(output, tensor)
        if not self.wait([seq]):
            return None
        return (self.acked[seq] - t0) / 1e6

    def throughput_mb_s(self, output: str, tensor: torch.Tensor, count: int, window: int) -> float | None:
        start = time.monotonic_ns()
        sent: list[int] = []
        for _ in range(count):
            while len([s for s in sent if s not in self.acked]) >= window:
                if not self.wait([min(s for s in sent if s not in self.acked)]):
                    return None
            sent.append(self.send(output, tensor)[0])
            self.pump(0)  # take acks as they come, without waiting
        if not self.wait(sent):
            return None
        end = max(self.acked[s] for s in sent)
        return count * tensor.numel() * tensor.element_size() / MB / ((end - start) / 1e9)


def run_sender() -> None:
    plan = json.loads(os.environ["PLAN"])
    device = plan["device"]
    node = Node()
    sender = Sender(node)
    sender.wait([], 0)
    time.sleep(1.0)  # let both receivers come up and dora settle its routes
    results = []
    for size in plan["sizes_mb"]:
        g = torch.Generator().manual_seed(size)
        tensor = torch.randint(0, 256, (size * MB,), dtype=torch.uint8, generator=g).to(device)
        row = {"size_mb": size}
        for path in ("local", "remote"):
            row[path] = {"latency_ms": [], "throughput_mb_s": [], "error": None}
            try:
                sender.latency_ms(path, tensor)  # warm-up: the first messages set up shared memory
            except tc.MessageTooLargeError as e:  # dora's relay between daemons caps messages
                text = str(e)
                row[path]["error"] = (
                    "over the 64 MiB of dora's daemon relay" if "relays it through its daemons" in text else text[:120]
                )
        live = [p for p in ("local", "remote") if row[p]["error"] is None]
        for _ in range(plan["reps"]):  # the paths take turns, so load drift hits both alike
            for path in live:
                row[path]["latency_ms"].append(sender.latency_ms(path, tensor))
        for _ in range(plan["runs"]):
            for path in live:
                row[path]["throughput_mb_s"].append(sender.throughput_mb_s(path, tensor, plan["count"], plan["window"]))
        results.append(row)
        print(f"cross-daemon bench: {size} MB done", flush=True)
    with open(plan["results"], "w") as f:
        json.dump(results, f)


def run_receiver() -> None:
    device = os.environ.get("DEVICE") or None
    node = Node()
    for event in node:
        if event["type"] != "INPUT":
            continue
        with tc.scope():
            tensor = tc.receive(event, device=device)
            if tensor.is_cuda:
                torch.cuda.current_stream().synchronize()
            usable = time.monotonic_ns()
            del tensor
        node.send_output("ack", pa.array([], pa.uint8()), {"seq": event["metadata"]["seq"], "usable_ns": usable})


if __name__ == "__main__":
    {"sender": run_sender, "receiver": run_receiver}[os.environ.get("ROLE", sys.argv[-1])]()
