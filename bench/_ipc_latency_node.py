"""The two nodes of bench/cuda_ipc.py (role from argv). One message in flight at a time (the
receiver acks each). Latency = receiver's `monotonic_ns` once the tensor is usable on its GPU
(stream synchronized) minus the sender's just before it started preparing the message.

Contenders: ``cuda-ipc`` (transport="cuda-ipc"); ``host-to-gpu``, what ``transport="auto"`` sends
under TC_IPC_MIN_BYTES (host bytes the receiver restores onto the same GPU; the sender sets the
floor above every size, so each of its auto sends takes it); ``cpu+host+cuda``, today's way:
`.cpu()`, host bytes, `.cuda()` at the receiver.

Codec overhead, by CUDA IPC and by host bytes (the `.cpu()` contender, its `.cpu()` not
counted): the sender times `tc.send` minus the time inside dora's `send_output`; the receiver
times `tc.receive` (by CUDA IPC: claim, cached segment and event, stream wait queued, views).

Device calls (plan "count_reps" > 0): after the timed messages, the sender sends each size by
CUDA IPC again, 2 messages to settle and then "count_reps" counted ones; both nodes count the
device calls inside the codec's work on each counted message (bench/_device_calls.py: CUDA's own
API through torch.profiler on a GPU, the backend's operations on the stand-in), never while timing.

With TRACE_DIR set, each node keeps its profiler trace of the counted messages, Python's calls
included, as TRACE_DIR/<role>.trace.json.gz: where a message's time goes, thread by thread.

With STAND_IN_DIR set (bench/cuda_ipc.py --stand-in, the CPU smoke test) both nodes use the CPU
stand-in backend of the tests (bench/_ipc_stand_in.py installs it, segments in that directory) and
CPU tensors: the same code paths, no GPU; its latencies are not GPU figures, its codec times are the
codec's Python cost."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import pyarrow as pa
import torch
from dora import Node

import tensor_codec as tc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _ipc_stand_in  # noqa: E402
from _device_calls import BackendCounter, CudaApiCounter  # noqa: E402

KB = 1 << 10
STAND_IN_DIR = os.environ.get("STAND_IN_DIR")
TIMED, SETTLE, COUNTED = "timed", "settle", "counted"  # phases; warm-up messages are neither timed nor counted
SETTLE_REPS = 2
_stand_in_backend = None


def gpu() -> torch.device:
    """The device the tensors live on: cuda:0, or the CPU under the stand-in backend."""
    if not STAND_IN_DIR:
        return torch.device("cuda", 0)
    global _stand_in_backend
    _stand_in_backend = _ipc_stand_in.install(STAND_IN_DIR)
    return torch.device("cpu")


def new_counter():
    """What counts device calls in this process: the stand-in's own counts, or CUDA's API."""
    if _stand_in_backend is not None:
        return BackendCounter(_stand_in_backend)
    trace_dir = os.environ.get("TRACE_DIR")
    return CudaApiCounter(os.path.join(trace_dir, f"{sys.argv[1]}.trace.json.gz") if trace_dir else None)


def counting(counter, name: str):
    return counter.range(name) if counter is not None else contextlib.nullcontext()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


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

    def __iter__(self):  # special methods are looked up on the type: __getattr__ never gives them
        return iter(self._node)


def send(node: TimedNode, contender: str, tensor: torch.Tensor, metadata: dict, counter=None) -> int:
    """Send one message of `contender`; -> the codec's time in `tc.send` (dora's excluded) for
    CUDA IPC and for host bytes (its `.cpu()` not included), else 0."""
    metadata["t0"] = time.monotonic_ns()
    if contender == "host-to-gpu":
        tc.send(node._node, "out", tensor, metadata)  # auto, under the floor set in run_sender
        return 0
    transport = "cuda-ipc" if contender == "cuda-ipc" else "host"
    if transport == "host":
        tensor = tensor.cpu()  # today's way: through the host
    node.in_dora_ns = 0
    start = time.perf_counter_ns()
    with counting(counter, f"send {metadata['size_kb']}"):
        tc.send(node, "out", tensor, metadata, transport=transport)
    return time.perf_counter_ns() - start - node.in_dora_ns


def run_sender() -> None:
    plan = json.loads(os.environ["PLAN"])
    os.environ["TC_IPC_MIN_BYTES"] = str(1 << 60)  # every auto send is under it (host-to-gpu)
    node = TimedNode(Node())
    device = gpu()
    tensors = {size: torch.randn(size * KB // 4, device=device) for size in plan["sizes_kb"]}
    queue = []
    for size in plan["sizes_kb"]:
        for rep in range(plan["warmup"] + plan["reps"]):
            for contender in plan["contenders"]:
                queue.append((contender, size, TIMED if rep >= plan["warmup"] else "warmup"))
    if plan.get("count_reps"):
        for size in plan["sizes_kb"]:
            queue += [("cuda-ipc", size, SETTLE)] * SETTLE_REPS + [("cuda-ipc", size, COUNTED)] * plan["count_reps"]
    codec, counter = [], None
    seq, waiting_since = 0, None
    for event in node:
        if event["type"] != "INPUT":
            continue
        if event["id"] == "ack" or (waiting_since is not None and time.monotonic() - waiting_since > 3.0):
            waiting_since = None
        if waiting_since is None:
            if seq == len(queue):
                break
            contender, size, phase = queue[seq]
            if phase == SETTLE and counter is None:  # after the timed messages: the profiler never times
                counter = new_counter()
            spent = send(
                node,
                contender,
                tensors[size],
                {"seq": seq, "contender": contender, "size_kb": size, "phase": phase},
                counter if phase == COUNTED else None,
            )
            if contender != "host-to-gpu" and phase == TIMED:
                codec.append({"contender": contender, "size_kb": size, "send_codec_ns": spent})
            seq += 1
            waiting_since = time.monotonic()
    tc.ipc_flush(10)
    with open(os.environ["SENDER_RESULTS"], "w") as f:
        json.dump({"codec": codec, "calls": counter.finish() if counter is not None else {}}, f)
    node.send_output("done", pa.array([0], pa.int64()))


def run_receiver() -> None:
    node = Node()
    device = gpu()
    results, counter = [], None
    for event in node:
        if event["type"] != "INPUT":
            continue
        if event["id"] == "done":
            break
        metadata = event["metadata"]
        phase, size = metadata["phase"], metadata["size_kb"]
        if phase == SETTLE and counter is None:
            counter = new_counter()
        counted = counter if phase == COUNTED else None
        scope = tc.scope()
        scope.__enter__()
        start = time.perf_counter_ns()
        with counting(counted, f"receive {size}"):
            tensor = tc.receive(event)
        decode_ns = time.perf_counter_ns() - start
        if tensor.device != device:
            tensor = tensor.to(device)
        synchronize(device)
        t1 = time.monotonic_ns()
        if phase == TIMED:
            results.append(
                {
                    "contender": metadata["contender"],
                    "size_kb": size,
                    "latency_ns": t1 - metadata["t0"],
                    "receive_codec_ns": decode_ns,
                }
            )
        # The views die, the scope hands the message back.
        with counting(counted, f"release {size}"):
            del tensor
            scope.__exit__(None, None, None)
        node.send_output("ack", pa.array([], pa.uint8()), {"seq": metadata["seq"]})
    with open(os.environ["RESULTS"], "w") as f:
        json.dump({"rows": results, "calls": counter.finish() if counter is not None else {}}, f)


if __name__ == "__main__":
    {"sender": run_sender, "receiver": run_receiver}[sys.argv[1]]()
