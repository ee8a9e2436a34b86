"""Test node for the CUDA IPC transport between two real processes of a dora dataflow.

ROLE=producer: waits for the consumer's `ready`, runs SCENARIO sending on output `data` with
transport="cuda-ipc", waits until the consumer released everything (or died), writes REPORT.
ROLE=consumer: says `ready` on every timer tick until data comes, checks every message, writes
REPORT when its input closes.

Scenarios:
* small: 300 small tensors allocated back to back on the GPU (one caching-allocator block),
  sent one by one; each must arrive bit-exact.
* race: 200 trials of "long kernel, then write the final value, then send at once" into the same
  tensor; the consumer must see the final value every time.
* slow: 40 messages of 8 MiB against a 32 MiB cap while the consumer holds each for 50 ms; the
  producer's bytes in flight must stay under the cap.
* crash: 4 messages of 16 MiB that the consumer keeps, then it kills itself (SIGKILL); the
  producer must get its memory back.
* floor: transport="auto" with TC_IPC_MIN_BYTES=4096: the 300 small tensors go as host bytes and
  must arrive on the GPU bit-exact, then 50 race trials alternating 1 KiB (host bytes) and 4 MiB
  (CUDA IPC) tensors; the consumer counts which way each came.
"""

import json
import os
import signal
import time

import pyarrow as pa
import torch
from dora import Node

import tensor_codec as tc
from tensor_codec.testing import assert_identical, make_many_small

ROLE = os.environ["ROLE"]
SCENARIO = os.environ["SCENARIO"]
REPORT = os.environ["REPORT"]
CAP = 32 << 20
SMALL = 300
TRIALS = 200
FLOOR = 4096
FLOOR_TRIALS = 50
QUIET_TICKS = 3


def write(report):
    with open(REPORT + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(REPORT + ".tmp", REPORT)


def produce(node):
    for event in node:
        if event["type"] == "INPUT" and event["id"] == "ready":
            break
        if event["type"] == "STOP":
            return
    device = torch.device("cuda", 0)
    report = {"scenario": SCENARIO, "sent": 0}
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated(device)
    if SCENARIO == "small":
        tensors = [t.to(device) for t in make_many_small(SMALL)]
        for i, t in enumerate(tensors):
            tc.send(node, "data", t, {"i": i}, transport="cuda-ipc")
            report["sent"] += 1
    elif SCENARIO == "race":
        x = torch.zeros(1 << 20, dtype=torch.int32, device=device)
        for trial in range(TRIALS):
            torch.cuda._sleep(20_000_000)  # a long kernel on the current stream...
            x.fill_(trial)  # ...then the final values, and send at once
            tc.send(node, "data", x, {"i": trial}, transport="cuda-ipc")
            report["sent"] += 1
    elif SCENARIO == "slow":
        tc.ipc_configure("data", max_bytes_in_flight=CAP, on_full="wait", timeout_s=60)
        x = torch.zeros(8 << 20, dtype=torch.uint8, device=device)
        baseline = torch.cuda.memory_allocated(device)
        peak = 0
        for i in range(40):
            x.fill_(i)
            tc.send(node, "data", x, {"i": i}, transport="cuda-ipc")
            report["sent"] += 1
            peak = max(peak, torch.cuda.memory_allocated(device) - baseline)
        report["cap"] = CAP
        report["peak_allocated_over_baseline"] = peak
    elif SCENARIO == "floor":
        os.environ["TC_IPC_MIN_BYTES"] = str(FLOOR)
        for i, t in enumerate([t.to(device) for t in make_many_small(SMALL)]):
            tc.send(node, "data", t, {"i": i})
            report["sent"] += 1
        under = torch.zeros(256, dtype=torch.int32, device=device)  # 1 KiB
        over = torch.zeros(1 << 20, dtype=torch.int32, device=device)  # 4 MiB
        for trial in range(FLOOR_TRIALS):
            x = under if trial % 2 else over
            torch.cuda._sleep(20_000_000)
            x.fill_(trial)
            tc.send(node, "data", x, {"i": SMALL + trial})
            report["sent"] += 1
    elif SCENARIO == "crash":
        x = torch.ones(16 << 20, dtype=torch.uint8, device=device)
        baseline = torch.cuda.memory_allocated(device)
        for i in range(4):
            tc.send(node, "data", x, {"i": i}, transport="cuda-ipc")
            report["sent"] += 1
        torch.cuda.synchronize()
        report["allocated_while_held"] = torch.cuda.memory_allocated(device) - baseline
    start = time.monotonic()
    report["flushed"] = tc.ipc_flush(60)
    report["flush_s"] = time.monotonic() - start
    # Released buffers wait in the pool for the next messages; trimming gives them back to torch.
    report["idle_after_flush"] = tc.ipc_stats()["pool"]["idle_bytes"]
    report["trimmed"] = tc.ipc_trim()
    report["allocated_after"] = torch.cuda.memory_allocated(device) - baseline
    report["stats"] = tc.ipc_stats()["outputs"].get("data", {})
    write(report)


def consume(node):
    report = {"scenario": SCENARIO, "received": 0, "bad": [], "errors": [], "ways": {}, "after_close": 0}
    seen = set()  # the messages' indices, to name the missing ones
    report["ended_by"] = "the event stream ended"
    small = make_many_small(SMALL) if SCENARIO in ("small", "floor") else None
    held = []
    started = False
    closed = False  # `data` closed: the messages still queued behind the close are read first
    quiet_ticks = 0  # ticks in a row without a message between them
    for event in node:
        if event["type"] == "INPUT" and event["id"] == "tick":
            if not started:
                node.send_output("ready", pa.array([1], type=pa.uint8()))
            # dora hands out INPUT_CLOSED before the inputs still queued behind it (its scheduler
            # puts events that are not inputs first; every message sent before the close is
            # already queued here by then), and it takes inputs in turns: two ticks in a row
            # after the close mean no message is left. (Not a time without messages: one message
            # can take seconds on a loaded machine, the first one initialising CUDA.)
            quiet_ticks += 1
            if closed and quiet_ticks >= QUIET_TICKS:
                report["ended_by"] = "quiet ticks after the close"
                break
            continue
        if event["type"] == "STOP":
            report["ended_by"] = "stop" + (" after the close" if closed else " before the close")
            break
        if event["type"] == "INPUT_CLOSED" and event["id"] == "data":
            closed = True
            continue
        if event["type"] != "INPUT" or event["id"] != "data":
            continue
        started = True
        quiet_ticks = 0
        i = event["metadata"]["i"]
        seen.add(i)
        report["after_close"] += closed
        try:
            got = tc.receive(event)
        except tc.CodecError as e:
            report["errors"].append(f"{i}: {e}")
            continue
        report["received"] += 1
        metadata = event["metadata"]
        header = json.loads(metadata["tc.header"])
        way = header["transport"]
        if way == "host" and "gpu" in header:  # top level: not producer.gpu
            way = "host-to-gpu"
        report["ways"][way] = report["ways"].get(way, 0) + 1
        if got.device.type != "cuda":
            report["bad"].append(f"{i}: on {got.device}")
        if SCENARIO == "floor" and i >= SMALL:
            if not bool((got == i - SMALL).all()):
                report["bad"].append(f"{i}: saw {got.unique()[:5].tolist()}")
        elif SCENARIO in ("small", "floor"):
            try:
                assert_identical(got, small[i])
            except AssertionError as e:
                report["bad"].append(f"{i}: {e}")
        elif SCENARIO == "race":
            if not bool((got == i).all()):
                report["bad"].append(f"{i}: saw {got.unique()[:5].tolist()}")
        elif SCENARIO == "slow":
            time.sleep(0.05)
            if not bool((got == i).all()):
                report["bad"].append(f"{i}: wrong values")
        elif SCENARIO == "crash":
            held.append(got)
            if len(held) == 4:
                write(report)
                torch.cuda.synchronize()
                os.kill(os.getpid(), signal.SIGKILL)
        del got
    report["receiver"] = tc.ipc_stats()["receiver"]
    expected = SMALL if SCENARIO == "small" else None
    if expected is not None:  # which ones never came (the first 20): a run that lost some says which
        report["missing"] = [i for i in range(expected) if i not in seen][:20]
    write(report)


node = Node()
produce(node) if ROLE == "producer" else consume(node)
