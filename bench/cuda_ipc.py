"""CUDA IPC end to end through a real dora dataflow (issue 4), against today's way of moving a GPU
tensor between processes: `.cpu()` -> dora (tensor_codec's host transport) -> `.cuda()`.

Goals (issue 30), each printed as a ratio measured in this run:
* latency flat in size: 64 MB within 1.2x of 4 KB (p50);
* 64 MB at least 30x faster than the `.cpu()` -> dora -> `.cuda()` path (p50);
* codec overhead per message, dora excluded, under 50 us in steady state (pooled buffers and
  events, opened once: p50 of the sender's `tc.send` minus dora's `send_output`, plus the
  receiver's `tc.receive`).
Small messages: it also times what `transport="auto"` sends under ``TC_IPC_MIN_BYTES`` (host
bytes restored onto the same GPU, "host-to-gpu"), prints the sizes at which host bytes were
faster and the ``TC_IPC_MIN_BYTES`` that follows from them, and judges the goal that auto, at
the floor in force for this run (``TC_IPC_MIN_BYTES`` of this process, else routing's default),
is never slower than host bytes (within 5 %, for noise at the crossover).

Device calls (issue 36): after the timed messages each size goes by CUDA IPC again, and both
nodes count the calls inside the codec's work on each message (bench/_device_calls.py): CUDA's
own API, runtime and driver, through torch.profiler (CUPTI). Printed per message and size, with
the goal that no set-up or host-blocking call (allocation, IPC handle exported or opened, event
made, synchronize, blocking copy) happens per message in steady state.

Needs a CUDA device; without one it says so and measures nothing. ``--stand-in`` runs the same
dataflow and code paths on the CPU stand-in backend of the tests (the CPU smoke test): its
figures are not GPU figures and its goals are not judged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _device_calls import forbidden, per_message  # noqa: E402
from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save, skipped  # noqa: E402
from dora_latency import run_flow  # noqa: E402

from tensor_codec import routing  # noqa: E402

CONTENDERS = ["cuda-ipc", "host-to-gpu", "cpu+host+cuda"]
NOISE = 1.05  # auto within 5 % of the best host path counts as never slower
BASELINE = ".cpu() -> dora (host bytes) -> .cuda() of the same tensor"


def run(
    sizes_kb: list[int],
    reps: int,
    warmup: int,
    count_reps: int,
    *,
    stand_in: bool = False,
    trace_dir: Path | None = None,
) -> tuple[list[dict], list[dict], dict]:
    """-> (the receiver's timed rows, the sender's codec times, the device calls counted on each
    side: {"sender": ..., "receiver": ...} as bench/_device_calls.py counts them)."""
    with tempfile.TemporaryDirectory(prefix="tc-bench-ipc-") as tmp:
        tmp = Path(tmp)
        stand_in_env = {"STAND_IN_DIR": str(tmp)} if stand_in else {}
        if trace_dir is not None:
            stand_in_env["TRACE_DIR"] = str(trace_dir.resolve())
        results, sender_results = tmp / "results.json", tmp / "sender.json"
        plan = {
            "sizes_kb": sizes_kb,
            "reps": reps,
            "warmup": warmup,
            "contenders": CONTENDERS,
            "count_reps": count_reps,
        }

        def node(role, **kw):
            return {
                "id": role,
                "path": sys.executable,
                "args": f"-u {HERE / '_ipc_latency_node.py'} {role}",
                **kw,
            }

        flow = {
            "nodes": [
                node(
                    "sender",
                    shared_memory_pool_size="256MB",
                    inputs={"tick": "dora/timer/millis/100", "ack": "receiver/ack"},
                    outputs=["out", "done"],
                    env={"PLAN": json.dumps(plan), "SENDER_RESULTS": str(sender_results), **stand_in_env},
                ),
                node(
                    "receiver",
                    inputs={"data": {"source": "sender/out", "queue_size": 4}, "done": "sender/done"},
                    outputs=["ack"],
                    env={"RESULTS": str(results), **stand_in_env},
                ),
            ]
        }
        run_flow(flow, tmp, results)
        received, sent = json.loads(results.read_text()), json.loads(sender_results.read_text())
        return received["rows"], sent["codec"], {"sender": sent["calls"], "receiver": received["calls"]}


def p50(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def recommended_floor(sizes_kb: list[int], ipc: dict[int, float], host: dict[int, float]) -> int | None:
    """The TC_IPC_MIN_BYTES that these figures ask for: the bytes of the smallest size from which
    CUDA IPC is at least as fast as host bytes at every larger size measured (0: at every size;
    None: not even at the largest, so no floor can be read from this run)."""
    ordered = sorted(sizes_kb)
    floor = None
    for size in reversed(ordered):
        if ipc[size] > host[size]:
            break
        floor = size
    if floor is None:
        return None
    return 0 if floor == ordered[0] else floor * 1024


def auto_vs_host(sizes_kb: list[int], floor: int, ipc: dict, to_gpu: dict, best_host: dict) -> tuple[float, int]:
    """-> (worst ratio of what auto takes at `floor` (CUDA IPC at or over it, host bytes onto the
    GPU under it) to the best host path measured, at which size)."""
    worst, where = 0.0, sizes_kb[0]
    for size in sizes_kb:
        auto = ipc[size] if size * 1024 >= floor else to_gpu[size]
        if auto / best_host[size] > worst:
            worst, where = auto / best_host[size], size
    return worst, where


def device_calls(calls: dict, sizes_kb: list[int], *, stand_in: bool) -> tuple[dict, float, str]:
    """Prints the calls per CUDA IPC message, per size and side. -> ({"send 4KB": {name: per
    message}, ...}, the most forbidden calls per message at any size and side, where)."""
    counted = {**per_message(calls.get("sender", {})), **per_message(calls.get("receiver", {}))}
    what = "the stand-in backend's operations" if stand_in else "CUDA API calls (CUPTI, runtime and driver)"
    print(f"Device calls per CUDA IPC message in steady state: {what}")
    table, worst, where = {}, 0.0, "-"
    for size in sizes_kb:
        for step in ("send", "receive", "release"):
            found = counted.get(f"{step} {size}")
            if found is None:
                continue
            table[f"{step} {size}KB"] = found
            bad = sum(n for name, n in found.items() if forbidden(name, stand_in=stand_in))
            if bad > worst:
                worst, where = bad, f"{step} {size} KB"
            listing = ", ".join(f"{name} {n:g}" for name, n in found.items()) or "none"
            print(f"{size:>7d}KB  {step:<8s} {sum(found.values()):5.1f}  ({listing})")
    return table, worst, where


def report(
    rows: list[dict], codec: list[dict], sizes_kb: list[int], calls: dict | None = None, *, judged: bool = True
) -> dict:
    """Prints the table and the goals; `judged=False` (the stand-in) leaves every goal unjudged."""
    print("CUDA IPC through dora, p50 latency in ms until the tensor is usable on the receiver's GPU")
    print(f"{'size':>9s}  {'cuda-ipc':>10s}  {'host-to-gpu':>12s}  {'.cpu()->dora->.cuda()':>22s}  {'speed-up':>9s}")
    lat = {}
    for size in sizes_kb:
        for c in CONTENDERS:
            lat[(c, size)] = p50(r["latency_ns"] for r in rows if r["contender"] == c and r["size_kb"] == size) / 1e6
        ipc, to_gpu, host = lat[("cuda-ipc", size)], lat[("host-to-gpu", size)], lat[("cpu+host+cuda", size)]
        print(f"{size:>7d}KB  {ipc:10.3f}  {to_gpu:12.3f}  {host:22.3f}  {host / ipc:8.1f}x")
    small, big = min(sizes_kb), max(sizes_kb)
    ipc_at = {s: lat[("cuda-ipc", s)] for s in sizes_kb}
    to_gpu = {s: lat[("host-to-gpu", s)] for s in sizes_kb}  # what auto sends under the floor
    best_host = {s: min(to_gpu[s], lat[("cpu+host+cuda", s)]) for s in sizes_kb}
    host_faster = [s for s in sizes_kb if best_host[s] < ipc_at[s]]
    floor_now = routing.ipc_min_bytes()
    floor_wanted = recommended_floor(sizes_kb, ipc_at, to_gpu)  # between the two ways auto can take
    worst, worst_at = auto_vs_host(sizes_kb, floor_now, ipc_at, to_gpu, best_host)
    flat = lat[("cuda-ipc", big)] / lat[("cuda-ipc", small)]
    speedup = lat[("cpu+host+cuda", big)] / lat[("cuda-ipc", big)]
    send_us = p50(c["send_codec_ns"] for c in codec if c["size_kb"] == small) / 1e3
    recv_us = p50(r["receive_codec_ns"] for r in rows if r["contender"] == "cuda-ipc" and r["size_kb"] == small) / 1e3
    goals = [
        goal(
            f"CUDA IPC latency flat in size: {big // 1024} MB p50 within 1.2x of {small} KB",
            flat,
            "<=",
            1.2,
            "x",
            f"ratio {flat:.2f}",
        ),
        goal(
            f"{big // 1024} MB by CUDA IPC at least 30x faster than .cpu() -> dora -> .cuda()",
            speedup,
            ">=",
            30,
            "x",
            f"{speedup:.1f}x",
        ),
        goal(
            "codec overhead per CUDA IPC message under 50 us (dora excluded)",
            send_us + recv_us,
            "<",
            50,
            "us",
            f"send {send_us:.1f} us + receive {recv_us:.1f} us = {send_us + recv_us:.1f} us",
        ),
        goal(
            f"transport='auto' (TC_IPC_MIN_BYTES={floor_now}) never slower than host bytes (within 5 %)",
            worst,
            "<=",
            NOISE,
            "x",
            f"worst {worst:.2f}x of the best host path, at {worst_at} KB",
        ),
    ]
    table, worst_calls, worst_calls_at = {}, 0.0, "-"
    if calls is not None:
        print()
        table, worst_calls, worst_calls_at = device_calls(calls, sizes_kb, stand_in=not judged)
        if not table:
            worst_calls, worst_calls_at = float("nan"), "no message was counted"
        goals.append(
            goal(
                "no set-up or host-blocking device call per CUDA IPC message in steady state",
                worst_calls,
                "<=",
                0,
                "calls",
                f"most per message: {worst_calls:g}, at {worst_calls_at}",
            )
        )
    print()
    if host_faster:
        print(f"host bytes were faster at {', '.join(f'{s} KB' for s in host_faster)}")
    else:
        print("CUDA IPC was faster at every size measured")
    if floor_wanted is None:
        print("no TC_IPC_MIN_BYTES follows: host bytes were faster even at the largest size")
    else:
        print(f"these figures ask for TC_IPC_MIN_BYTES={floor_wanted} (in force: {floor_now})")
    if judged:
        print_goals(goals)
    else:
        for g in goals:
            g["met"] = None
        print("  goals not judged: the CPU stand-in backend's figures are not GPU figures")
    return {
        "host_faster_kb": host_faster,
        "latency_ms": {f"{c}/{s}KB": v for (c, s), v in lat.items()},
        "flat_ratio": flat,
        "speedup": speedup,
        "codec_us": send_us + recv_us,
        "ipc_min_bytes": floor_now,
        "recommended_ipc_min_bytes": floor_wanted,
        "auto_vs_host": worst,
        "device_calls_per_message": table,
        "goals": goals,
        "rows": [
            {"contender": c, "size_kb": s, "p50_ms": v, "baseline": c == "cpu+host+cuda"} for (c, s), v in lat.items()
        ],
    }


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-kb", default="4,64,256,1024,16384,65536")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--count-reps", type=int, default=10, help="messages per size whose device calls are counted (0: none)"
    )
    parser.add_argument(
        "--stand-in",
        action="store_true",
        help="run on the tests' CPU stand-in backend (no GPU; a smoke test of this script, figures meaningless)",
    )
    parser.add_argument(
        "--trace-dir",
        type=Path,
        default=None,
        help="keep each node's profiler trace of the counted messages (Python calls included) here",
    )
    add_json_option(parser, "cuda_ipc")
    args = parser.parse_args(argv)
    if args.stand_in:
        sizes = [int(s) for s in args.sizes_kb.split(",")]
        rows, codec, calls = run(sizes, args.reps, args.warmup, args.count_reps, stand_in=True)
        print("(CPU stand-in backend)")
        counted = calls if args.count_reps else None
        return save(
            "cuda_ipc", BASELINE + " (CPU stand-in run)", report(rows, codec, sizes, counted, judged=False), args.json
        )
    if not torch.cuda.is_available():
        print("cuda_ipc.py: no CUDA device on this machine, nothing measured (run it on a GPU machine)")
        skipped("cuda_ipc", BASELINE, "no CUDA device on this machine", args.json)
        return None
    sizes = [int(s) for s in args.sizes_kb.split(",")]
    rows, codec, calls = run(sizes, args.reps, args.warmup, args.count_reps, trace_dir=args.trace_dir)
    return save("cuda_ipc", BASELINE, report(rows, codec, sizes, calls if args.count_reps else None), args.json)


if __name__ == "__main__":
    main()
