"""The two nodes of bench/dora_latency.py (one script, role from argv): a sender that sends one
message at a time and a receiver that turns each into a usable tensor, records the latency and
acks. Latency = receiver's `monotonic_ns` when the tensor is usable minus the sender's just before
it started preparing the message (one machine, one clock). The sender also records the CPU time
its thread spent in each send (`send`), which a preempted sender does not inflate, and in
`--split` the part of it before dora's call (`DoraCallTimed`)."""

from __future__ import annotations

import json
import os
import random
import sys
import time

import numpy as np
import pyarrow as pa
import torch
from dora import Node

import tensor_codec as tc

try:
    from tensor_codec.dora import Link
except ImportError:  # a tensor_codec from before its dora package (compare_revisions.py --scripts current)
    Link = None

# tc with one of dora's primitives forced: the output's `copies_below` (tc picks per message by
# size, below it dora's send_output copies the bytes) set for that contender's messages alone. The
# rows that show whether tc's choice is the faster one on this machine.
FORCED_PRIMITIVE = {"tc:send_output": 1 << 62, "tc:send_output_raw": 0}

MB = 1 << 20


def make_tensor(layout: str, nbytes: int) -> torch.Tensor:
    """A float32 tensor of `nbytes` logical bytes in the given layout."""
    n = nbytes // 4
    cols = 1024
    rows = n // cols
    g = torch.Generator().manual_seed(nbytes)
    if layout == "contiguous":
        return torch.randn(rows, cols, generator=g)
    if layout == "transposed":
        return torch.randn(cols, rows, generator=g).t()
    if layout == "strided_crop":
        return torch.randn(2 * rows, 2 * cols, generator=g)[::2, 1::2]
    if layout == "image":  # what the project's camera and decoder send: a TVTensor (RGBA, float32)
        from torchvision import tv_tensors

        return tv_tensors.Image(torch.randn(4, rows // 4, cols, generator=g))
    raise ValueError(layout)


def bytes_of(tensor: torch.Tensor, unit: pa.DataType) -> pa.Array:
    """A contiguous tensor's bytes as an Arrow array of `unit`, viewing its memory (no copy)."""
    data = pa.foreign_buffer(tensor.data_ptr(), tensor.numel() * tensor.element_size(), base=tensor)
    return pa.Array.from_buffers(unit, data.size // (unit.bit_width // 8), [None, data])


# --split: tc's cost taken apart. The floor is `send_output` (the bytes typed as the tensor,
# received by DLPack and views); these add to it tc's metadata alone (carried by dora, unread),
# the same header as wire format 1 carried it (beside its tc.version and tc.transport keys: what
# folding them into the header saves), tc's sender alone (its message read as the floor reads
# one) and tc's receiver alone.
SPLIT = ("send_output+tc-metadata", "send_output+v1-keys", "tc.send-only", "tc.receive-only")
_tc_metadata: dict = {}  # per tensor shape and dtype: what tc.send puts in the metadata
V1_KEYS = {"tc.version": 1, "tc.transport": "host"}  # wire format 1's keys beside tc.header


def tc_metadata(tensor: torch.Tensor) -> dict:
    key = (tuple(tensor.shape), tensor.dtype)
    if key not in _tc_metadata:
        _tc_metadata[key] = tc.encode(tensor)[1]  # tc.send's keys: the same header
    return _tc_metadata[key]


class DoraCallTimed:
    """The sender's node as the contenders see it in `--split`: each call of dora's
    `send_output` or `send_output_raw` records when it came (this thread's CPU time), so that a
    send's own work before dora's call is read apart from dora's copy and what follows it: two
    contenders running the same code in one dataflow came out 0.1 to 0.4 us apart this way (three
    runs), where the whole send's CPU time moves by several microseconds with the copy. The
    node's other attributes are its own."""

    __slots__ = ("node", "called_at", "__weakref__")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.called_at: int | None = None

    def send_output(self, *args, **kwargs):
        self.called_at = time.thread_time_ns()
        return self.node.send_output(*args, **kwargs)

    def send_output_raw(self, *args, **kwargs):
        self.called_at = time.thread_time_ns()
        return self.node.send_output_raw(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.node, name)


def send(node: Node | DoraCallTimed, contender: str, tensor: torch.Tensor, metadata: dict) -> tuple[int, int | None]:
    """Send `tensor` the contender's way. -> the CPU time this thread spent in it, in ns
    (`time.thread_time_ns`: dora's copy included, time the sender waited for a core left out),
    and, on a `DoraCallTimed` node, the part of it before dora's call (None otherwise)."""
    metadata["t0"] = time.monotonic_ns()
    timed = node if type(node) is DoraCallTimed else None
    if timed is not None:
        timed.called_at = None
    started = time.thread_time_ns()
    _send(node, contender, tensor, metadata)
    ended = time.thread_time_ns()
    called_at = None if timed is None else timed.called_at
    return ended - started, None if called_at is None else called_at - started


def _send(node: Node, contender: str, tensor: torch.Tensor, metadata: dict) -> None:
    if type(tensor) is not torch.Tensor and not contender.startswith("tc"):
        tensor = tensor.as_subclass(torch.Tensor)  # an Image's bytes, sent as plain senders do
    if contender in ("tc", "tc.send-only"):
        tc.send(node, "out", tensor, metadata)
    elif contender in ("send_output+tc-metadata", "tc.receive-only"):
        node.send_output("out", bytes_of(tensor, pa.float32()), metadata | tc_metadata(tensor))
    elif contender == "send_output+v1-keys":
        node.send_output("out", bytes_of(tensor, pa.float32()), metadata | tc_metadata(tensor) | V1_KEYS)
    elif contender in FORCED_PRIMITIVE:
        send_forced(node, FORCED_PRIMITIVE[contender], tensor, metadata)
    elif contender == "raw":  # plain send_output_raw of the same bytes (contiguous input only)
        source = tensor.numpy().reshape(-1).view(np.uint8)
        with node.send_output_raw("out", source.nbytes, metadata=metadata) as buf:
            np.frombuffer(buf, np.uint8)[:] = source
    elif contender == "contiguous+raw":  # t.contiguous(), then the plain raw send
        source = tensor.contiguous().numpy().reshape(-1).view(np.uint8)
        with node.send_output_raw("out", source.nbytes, metadata=metadata) as buf:
            np.frombuffer(buf, np.uint8)[:] = source
    elif contender == "send_output":  # dora's other primitive: it copies the bytes of an Arrow array
        # Typed as the tensor (Float32), as tc hands them to dora: a receiver's DLPack view then has
        # the tensor's dtype; dora 1.1 sends wider types faster than UInt8.
        node.send_output("out", bytes_of(tensor, pa.float32()), metadata)
    elif contender == "send_output:uint8":  # the same, as UInt8: what tc's choice of unit is measured against
        node.send_output("out", bytes_of(tensor, pa.uint8()), metadata)
    elif contender == "pa.array":  # the common pattern
        node.send_output("out", pa.array(tensor.contiguous().numpy().ravel()), metadata)
    else:
        raise ValueError(contender)


def send_forced(node: Node, copies_below: int, tensor: torch.Tensor, metadata: dict) -> None:
    """`tc.send` with the output's `copies_below` set for this message (then as it was: the
    other contenders share the output). A tensor_codec without Outputs has no such option: its
    own choice goes."""
    if Link is None:
        tc.send(node, "out", tensor, metadata)
        return
    output = Link.of(node).output("out")
    chosen = output.copies_below
    output.copies_below = copies_below
    try:
        tc.send(node, "out", tensor, metadata)
    finally:
        output.copies_below = chosen


def usable(event: dict) -> torch.Tensor:
    metadata = event["metadata"]
    contender = metadata["contender"]
    shape = tuple(metadata["shape"])
    if contender in ("tc", "tc.receive-only") or contender in FORCED_PRIMITIVE:
        return tc.receive(event)
    if contender in ("raw", "contiguous+raw", "send_output", "send_output:uint8", *SPLIT):
        return torch.from_dlpack(event["value"]).view(torch.float32).view(shape)
    if contender == "pa.array":
        return torch.from_numpy(event["value"].to_numpy(zero_copy_only=False)).reshape(shape)
    raise ValueError(contender)


def run_sender() -> None:
    plan = json.loads(os.environ["PLAN"])
    node = Node()
    sending = DoraCallTimed(node) if plan.get("time_dora_call") else node
    tensors = {}
    queue = []  # (layout, contender, size, warmup, round)
    for size, reps in zip(plan["sizes_mb"], plan["reps"], strict=True):  # reps: per size (messages_per_contender)
        for layout in plan["layouts"]:
            tensors[(layout, size)] = make_tensor(layout, size * MB)
        # Each round in its own order (shuffled, the same in every run): what a message leaves
        # behind (dora's pool, the caches) comes before every contender alike, not always before
        # the same one; a fixed order measured identical code paths up to 8 % apart.
        turns = [(layout, c) for layout, contenders in plan["layouts"].items() for c in contenders]
        order = random.Random(size)
        for rep in range(plan["warmup"] + reps):
            order.shuffle(turns)
            for layout, contender in turns:
                queue.append((layout, contender, size, rep < plan["warmup"], rep))
    seq = 0
    waiting_since = None
    lost = 0
    send_cpu_ns: list[int | None] = [None] * len(queue)  # by seq
    before_dora_ns: list[int | None] = [None] * len(queue)
    for event in node:
        if event["type"] != "INPUT":
            continue
        now = time.monotonic()
        if event["id"] == "ack":
            waiting_since = None
        elif waiting_since is not None and now - waiting_since > 3.0:
            lost += 1  # dora dropped the message or its ack: move on
            waiting_since = None
        if waiting_since is None:
            if seq == len(queue):
                break
            layout, contender, size, warmup, round_ = queue[seq]
            tensor = tensors[(layout, size)]
            send_cpu_ns[seq], before_dora_ns[seq] = send(
                sending,
                contender,
                tensor,
                {
                    "seq": seq,
                    "layout": layout,
                    "contender": contender,
                    "size_mb": size,
                    "warmup": warmup,
                    "round": round_,  # each contender's messages of one round pair up (dora_latency.round_samples)
                    "shape": list(tensor.shape),
                },
            )
            seq += 1
            waiting_since = time.monotonic()
    node.send_output("done", pa.array([lost], pa.int64()))
    with open(os.environ["SEND_TIMES"], "w") as f:
        json.dump({"send_cpu_ns": send_cpu_ns, "before_dora_ns": before_dora_ns}, f)


def run_receiver() -> None:
    node = Node()
    results = []
    for event in node:
        if event["type"] != "INPUT":
            continue
        if event["id"] == "done":
            break
        metadata = event["metadata"]
        with tc.scope():
            started = time.monotonic_ns()
            tensor = usable(event)
            t1 = time.monotonic_ns()
            ok = tensor.shape == tuple(metadata["shape"]) and tensor.dtype == torch.float32
            if not metadata["warmup"]:
                results.append(
                    {k: metadata[k] for k in ("seq", "layout", "contender", "size_mb", "round")}
                    | {"latency_ns": t1 - metadata["t0"], "receive_ns": t1 - started, "ok": bool(ok)}
                )
            del tensor
        node.send_output("ack", pa.array([], pa.uint8()), {"seq": metadata["seq"]})
    with open(os.environ["RESULTS"], "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    {"sender": run_sender, "receiver": run_receiver}[sys.argv[1]]()
