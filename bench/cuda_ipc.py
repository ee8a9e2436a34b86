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

The codec's Python cost (issue 62), measured before the dataflow starts, with goals judged on
any machine: in one process (producer and receiver both, on the CPU stand-in backend of the
tests, whatever the machine), `tc.encode` + `tc.decode` + dropping the result of a uint8 tensor
by CUDA IPC at most 2.5x the same by host bytes, in interleaved batches, at each of
``--inproc-sizes-kb``; and the codec's time per CUDA IPC message through dora (the figure of the
50 us goal) at most 3x bench/small_message.py's encode + decode of a 1 KB message whose header
was seen before, timed in this run. Beside it, not judged, host bytes' codec time per message in
the same dataflow: nodes that wait for dora between messages run the codec with cold caches,
which small_message's loop does not, and host bytes pay that too.

Needs a CUDA device; without one it says so and measures nothing. ``--stand-in`` runs the same
dataflow and code paths on the CPU stand-in backend of the tests (the CPU smoke test): its
latencies and device calls are not GPU figures and their goals are not judged; the Python-cost
goals are (the stand-in does the codec's Python work as a GPU does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _device_calls import forbidden, per_message  # noqa: E402
from _goals import goal, print_goals  # noqa: E402
from _ipc_stand_in import in_one_process  # noqa: E402
from _results import add_json_option, save, skipped  # noqa: E402
from _timing import per_call_seconds  # noqa: E402
from dora_latency import run_flow  # noqa: E402
from small_message import make_cases  # noqa: E402

import tensor_codec as tc  # noqa: E402
from tensor_codec import routing  # noqa: E402

KB = 1 << 10
CONTENDERS = ["cuda-ipc", "host-to-gpu", "cpu+host+cuda"]
NOISE = 1.05  # auto within 5 % of the best host path counts as never slower
BASELINE = ".cpu() -> dora (host bytes) -> .cuda() of the same tensor"
IN_PROCESS = ("host", "cuda-ipc")  # the transports timed in one process, a batch of each in turn
INPROC_GOAL = 2.5  # issue 62: CUDA IPC's codec per message in one process, times host bytes'
SMALL_MESSAGE_GOAL = 3.0  # issue 62: the codec per CUDA IPC message through dora, times small_message's "warm"
STAND_IN_COST = "Python cost on the CPU stand-in backend"


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


def codec_p50(codec: list[dict], rows: list[dict], contender: str, size_kb: int) -> tuple[float, float]:
    """-> the p50 of the codec's time in us per message of `contender` at `size_kb`, in the
    sender's `tc.send` (dora's share excluded) and in the receiver's `tc.receive`."""
    send = p50(c["send_codec_ns"] for c in codec if c["contender"] == contender and c["size_kb"] == size_kb)
    receive = p50(r["receive_codec_ns"] for r in rows if r["contender"] == contender and r["size_kb"] == size_kb)
    return send / 1e3, receive / 1e3


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
    send_us, recv_us = codec_p50(codec, rows, "cuda-ipc", small)
    host_send_us, host_recv_us = codec_p50(codec, rows, "cpu+host+cuda", small)
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
        print("  GPU goals not judged: the CPU stand-in backend's latencies and calls are not GPU figures")
    return {
        "host_faster_kb": host_faster,
        "latency_ms": {f"{c}/{s}KB": v for (c, s), v in lat.items()},
        "flat_ratio": flat,
        "speedup": speedup,
        "codec_us": send_us + recv_us,
        "host_codec_us": host_send_us + host_recv_us,
        "ipc_min_bytes": floor_now,
        "recommended_ipc_min_bytes": floor_wanted,
        "auto_vs_host": worst,
        "device_calls_per_message": table,
        "goals": goals,
        "rows": [
            {"contender": c, "size_kb": s, "p50_ms": v, "baseline": c == "cpu+host+cuda"} for (c, s), v in lat.items()
        ],
    }


def round_trip(tensor: torch.Tensor, transport: str) -> Callable[[], None]:
    """One message in one process: `tensor` encoded by `transport`, decoded, and the result dropped
    at once (as its last view dies, a CUDA IPC message is given back to its producer)."""

    def call() -> None:
        value, metadata = tc.encode(tensor, transport=transport)
        tc.decode(value, metadata)

    return call


def interleaved(calls: dict[str, Callable[[], object]], *, batch: int, batches: int) -> dict[str, float]:
    """Seconds per call of each of `calls`: the median of its `batches` batches of `batch` calls,
    taken in turn (a batch of each, then again, after one untimed round), so that a load which
    comes and goes on a shared machine weighs on all of them alike."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(1 + batches):
        for name, call in calls.items():
            seconds = per_call_seconds(call, batch=batch, batches=1, warmup=0)
            if round_:
                samples[name].append(seconds)
    return {name: statistics.median(values) for name, values in samples.items()}


def inproc_cost(sizes_kb: list[int], *, batch: int, batches: int) -> dict[int, dict[str, float]]:
    """-> {size: {transport: seconds per message}}: each of IN_PROCESS's round trips of a uint8
    tensor of each size, this process producer and receiver both, on the CPU stand-in backend
    (installed for this measurement only: the codec's own work without a GPU's)."""
    costs = {}
    with tempfile.TemporaryDirectory(prefix="tc-bench-ipc-inproc-") as tmp, in_one_process(tmp):
        for size in sizes_kb:
            tensor = torch.randint(0, 256, (size * KB,), dtype=torch.uint8)
            calls = {transport: round_trip(tensor, transport) for transport in IN_PROCESS}
            costs[size] = interleaved(calls, batch=batch, batches=batches)
    return costs


def small_message_seconds(*, batch: int, batches: int) -> float:
    """bench/small_message.py's encode + decode of 1 KB BoundingBoxes whose header was seen before
    ("warm"), timed in this run: the scale the codec's cost per CUDA IPC message is judged on."""
    return per_call_seconds(make_cases(1)["warm"], batch=batch, batches=batches)


def size_label(size_kb: int) -> str:
    return f"{size_kb // 1024} MB" if size_kb >= 1024 and size_kb % 1024 == 0 else f"{size_kb} KB"


def python_cost(
    inproc: dict[int, dict[str, float]],
    codec_us: float,
    small_message_s: float,
    *,
    stand_in: bool,
    host_codec_us: float,
) -> dict:
    """Prints the codec's Python cost against its two scales and judges its goals (on the stand-in
    too: the in-process figures always come from it, and through dora its codec times are the
    codec's Python work). `codec_us`: `report`'s codec time per CUDA IPC message through dora;
    `host_codec_us`: the same for host bytes, in the same dataflow (printed beside it, not judged:
    a node that waits for dora between messages runs its codec with cold caches, which
    small_message's loop does not, and this says how much of the figure that is)."""
    print("Codec per message in one process: encode + decode + the result dropped, uint8 tensor")
    print(f"({STAND_IN_COST}; medians of interleaved batches)")
    print(f"{'size':>9s}  {'host us':>9s}  {'cuda-ipc us':>11s}  {'ratio':>7s}")
    rows, goals = [], []
    for size, seconds in inproc.items():
        host_us, ipc_us = seconds["host"] * 1e6, seconds["cuda-ipc"] * 1e6
        ratio = ipc_us / host_us
        rows.append({"size_kb": size, "host_us": host_us, "ipc_us": ipc_us, "ratio": ratio})
        print(f"{size:>7d}KB  {host_us:9.1f}  {ipc_us:11.1f}  {ratio:6.2f}x")
        goals.append(
            goal(
                f"CUDA IPC codec per message in one process at most {INPROC_GOAL:g}x host bytes' at "
                f"{size_label(size)} ({STAND_IN_COST})",
                ratio,
                "<=",
                INPROC_GOAL,
                "x",
                f"host {host_us:.1f} us, cuda-ipc {ipc_us:.1f} us: {ratio:.2f}x",
            )
        )
    small_us = small_message_s * 1e6
    ratio = codec_us / small_us
    where = STAND_IN_COST if stand_in else "on this GPU"
    print()
    print(
        f"Codec per CUDA IPC message through dora (send + receive): {codec_us:.1f} us, {ratio:.2f}x "
        f"small_message.py's encode + decode of 1 KB, header seen before ({small_us:.1f} us in this run)"
    )
    host_ratio = codec_us / host_codec_us
    print(
        f"  host bytes' codec per message in the same dataflow (.cpu() not counted): {host_codec_us:.1f} us, "
        f"{host_codec_us / small_us:.2f}x small_message's; CUDA IPC {host_ratio:.2f}x host bytes' through dora"
    )
    goals.append(
        goal(
            f"codec per CUDA IPC message through dora at most {SMALL_MESSAGE_GOAL:g}x small_message's "
            f"seen-header encode + decode ({where})",
            ratio,
            "<=",
            SMALL_MESSAGE_GOAL,
            "x",
            f"{codec_us:.1f} us against {small_us:.1f} us: {ratio:.2f}x",
        )
    )
    print("Goals (issue 62):")
    print_goals(goals)
    return {
        "inproc": rows,
        "small_message_warm_us": small_us,
        "codec_vs_small_message": ratio,
        "codec_vs_host_through_dora": host_ratio,
        "goals": goals,
    }


def kb_sizes(text: str) -> list[int]:
    """An option's sizes in KB, comma-separated (argparse's type: its error names the option)."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"expected sizes in KB above 0, comma-separated (4,1024), got {text!r:.80}")
    return sizes


def positive_int(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r:.80}")
    return number


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-kb", type=kb_sizes, default="4,64,256,1024,16384,65536")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--count-reps", type=int, default=10, help="messages per size whose device calls are counted (0: none)"
    )
    parser.add_argument(
        "--inproc-sizes-kb",
        type=kb_sizes,
        default="4,1024",
        help="sizes of the codec's cost in one process, CUDA IPC against host bytes (default 4,1024)",
    )
    parser.add_argument(
        "--python-batch",
        type=positive_int,
        default=200,
        help="calls per timed batch of the Python-cost figures: in one process, and small_message's (default 200)",
    )
    parser.add_argument(
        "--python-batches",
        type=positive_int,
        default=15,
        help="timed batches of each of those figures, the median counts (default 15)",
    )
    parser.add_argument(
        "--stand-in",
        action="store_true",
        help="run on the tests' CPU stand-in backend (no GPU; latencies meaningless, the Python-cost goals judged)",
    )
    parser.add_argument(
        "--trace-dir",
        type=Path,
        default=None,
        help="keep each node's profiler trace of the counted messages (Python calls included) here",
    )
    add_json_option(parser, "cuda_ipc")
    args = parser.parse_args(argv)
    if not args.stand_in and not torch.cuda.is_available():
        print("cuda_ipc.py: no CUDA device on this machine, nothing measured (run it on a GPU machine)")
        skipped("cuda_ipc", BASELINE, "no CUDA device on this machine", args.json)
        return None
    # The Python-cost figures first, while no dataflow runs beside them.
    timing = {"batch": args.python_batch, "batches": args.python_batches}
    inproc = inproc_cost(args.inproc_sizes_kb, **timing)
    small_message_s = small_message_seconds(**timing)
    trace_dir = None if args.stand_in else args.trace_dir
    sizes = args.sizes_kb
    rows, codec, calls = run(
        sizes, args.reps, args.warmup, args.count_reps, stand_in=args.stand_in, trace_dir=trace_dir
    )
    if args.stand_in:
        print("(CPU stand-in backend)")
    counted = calls if args.count_reps else None
    figures = report(rows, codec, sizes, counted, judged=not args.stand_in)
    print()
    cost = python_cost(
        inproc, figures["codec_us"], small_message_s, stand_in=args.stand_in, host_codec_us=figures["host_codec_us"]
    )
    figures = {**figures, **cost, "goals": figures["goals"] + cost["goals"]}
    baseline = BASELINE + (" (CPU stand-in run)" if args.stand_in else "")
    return save("cuda_ipc", baseline, figures, args.json)


if __name__ == "__main__":
    main()
