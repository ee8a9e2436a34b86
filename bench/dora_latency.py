"""End-to-end latency through a real dora dataflow: tc.send / tc.receive against the ways people
send tensors today, every contender with the same shared-memory pool, measured in one run.

Goals (issue 2), each printed as a ratio of p50 latencies:
* contiguous tensors, 1 MB to 64 MB: tc within 1.2x of plain `send_output_raw` of the same bytes;
* non-contiguous (a transpose, a strided crop): tc faster than `t.contiguous()` + that raw send;
* a tv_tensors.Image (what the project's camera and JPEG decoder send): tc within 1.2x of the raw
  send of its bytes;
* every case: tc never slower than `pa.array(t.contiguous().numpy().ravel())` + `send_output`,
  received with `torch.from_numpy(...).reshape(...)`; issue 18 names contiguous 1 MB end to end
  in particular (tc / pa.array p50 <= 1.0x; 1.06 to 1.18x before its redesign);
* issue 33: that at every contiguous size, tc's own cost over the faster of dora's primitives under
  20 us at 1 MB, and tc picking the faster primitive and the faster type for send_output's bytes
  (the table "dora's primitives"). `--profile DIR` samples tc's two nodes with py-spy instead;
  `--split` takes tc's cost over the floor apart (its metadata in dora, and as wire format 1
  carried it; its sender; its receiver), with each one's receive time and its sender's CPU time
  in the send.

One message is in flight at a time (the receiver acks each), so latency is not queueing; the
contenders are interleaved round by round, each round shuffled, so drift in machine load and
what one message leaves behind (dora's pool, the caches) hit them alike. Every size sends the
same bytes per contender (`--reps` messages at the largest, 64 times as many at 1 MB of 64:
`messages_per_contender`), and each figure judged against a goal is printed with its 95%
interval (a bootstrap of this run's rounds, drawn whole: a round's load, shared by its contenders,
stays out of a figure that compares them), so one run says whether it resolves the goal. The
results' `machine.python_speed_us` says how fast the machine ran Python meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.append(str(ROOT))  # tensor_codec (after PYTHONPATH: compare_revisions.py may name another tree's)
MB = 1 << 20

from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save  # noqa: E402
from _timing import interval, resampled_medians  # noqa: E402

LAYOUTS = {
    # send_output: dora's other primitive (it copies an Arrow array's bytes); tc:<primitive>: tc
    # with that primitive forced, to check the one tc picks by size is the faster here.
    "contiguous": ["raw", "send_output", "tc", "pa.array", "tc:send_output", "tc:send_output_raw", "send_output:uint8"],
    "transposed": ["contiguous+raw", "tc", "pa.array"],
    "strided_crop": ["contiguous+raw", "tc", "pa.array"],
    # A tv_tensors.Image (tc sends its class; the others its bytes): the project's own streams.
    "image": ["raw", "tc", "pa.array"],
}
BASELINE = {"contiguous": "raw", "transposed": "contiguous+raw", "strided_crop": "contiguous+raw", "image": "raw"}
BASELINE_TEXT = (
    "plain send_output_raw of the bytes (contiguous; t.contiguous() first for the other layouts), "
    "and the pa.array pattern"
)


def dora_cli() -> str:
    found = shutil.which("dora") or str(Path(sys.executable).parent / "dora")
    if not Path(found).exists():
        sys.exit("dora CLI not found (pip install dora-rs-cli)")
    return found


def run_flow(flow: dict, tmp: Path, results: Path) -> None:
    """`dora run` a benchmark dataflow in `tmp` with the repository importable; exit with dora's
    output if it fails or leaves no `results`."""
    (tmp / "dataflow.yml").write_text(json.dumps(flow, indent=1))
    # A PYTHONPATH given comes first: compare_revisions.py runs this script against another tree's
    # tensor_codec (--scripts current), and the nodes must import that one too.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)])))
    proc = subprocess.run(
        [dora_cli(), "run", str(tmp / "dataflow.yml")], cwd=tmp, env=env, capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0 or not results.exists():
        sys.exit(f"dataflow failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


def messages_per_contender(sizes_mb: list[int], reps: int) -> list[int]:
    """How many messages each contender sends at each size: `reps` at the run's largest size, and
    as many more at a smaller one as its messages are smaller (the same bytes at every size).
    A message's cost beyond dora's copy is a few tens of microseconds whatever its size, and the
    spread of one message's latency on a shared machine is about as large: at 1 MB, 40 messages
    left a p50 that moved by 50 us from run to run (2026-11-28), more than the 20 us goal it is
    judged by; the thousands that the same bytes make at 1 MB resolve it, in the time a 64 MB
    size takes anyway."""
    largest = max(sizes_mb)
    return [max(1, round(reps * largest / size)) for size in sizes_mb]


def run(
    sizes_mb: list[int], reps: int, warmup: int, pool: str, layouts=None, sampler=None, time_dora_call=False
) -> list[dict]:
    """Every contender of `layouts` (default LAYOUTS) at every size through one dataflow,
    `messages_per_contender` of each: a row per message measured, with its latency, its
    receiver's time to a usable tensor and its sender's CPU time in the send (`send_cpu_ns`);
    with `time_dora_call`, also the part of that before dora's call (`before_dora_ns`: the
    sender's own work; `_latency_node.DoraCallTimed`). `sampler(role)`: the command line (path,
    args) that starts a node under a profiler instead."""
    with tempfile.TemporaryDirectory(prefix="tc-bench-") as tmp:
        tmp = Path(tmp)
        results = tmp / "results.json"
        send_times = tmp / "send_times.json"
        plan = {
            "sizes_mb": sizes_mb,
            "reps": messages_per_contender(sizes_mb, reps),
            "warmup": warmup,
            "layouts": layouts or LAYOUTS,
            "time_dora_call": time_dora_call,
        }

        def node(role, **kw):
            path, args = sys.executable, f"-u {HERE / '_latency_node.py'} {role}"
            if sampler is not None:
                path, args = sampler(role, path, args)
            return {"id": role, "path": path, "args": args, **kw}

        flow = {
            "nodes": [
                node(
                    "sender",
                    shared_memory_pool_size=pool,
                    inputs={"tick": "dora/timer/millis/100", "ack": "receiver/ack"},
                    outputs=["out", "done"],
                    env={"PLAN": json.dumps(plan), "SEND_TIMES": str(send_times)},
                ),
                node(
                    "receiver",
                    inputs={"data": {"source": "sender/out", "queue_size": 4}, "done": "sender/done"},
                    outputs=["ack"],
                    env={"RESULTS": str(results)},
                ),
            ]
        }
        run_flow(flow, tmp, results)
        rows = json.loads(results.read_text())
        times = json.loads(send_times.read_text())  # each by the message's seq
        for row in rows:
            row["send_cpu_ns"] = times["send_cpu_ns"][row["seq"]]
            row["before_dora_ns"] = times["before_dora_ns"][row["seq"]]
        return rows


# Printed beside each figure judged against a goal: `_timing.resampled_medians` of this run.
INTERVAL = "95% interval"
# Fewer messages a contender and the bootstrap's interval says nothing (two gave a ratio of 2.55
# "between 0.96 and 4.35"): it is left out.
INTERVAL_MIN_MESSAGES = 20


def round_samples(rows: list[dict], layout: str, size_mb: int, contenders) -> tuple[dict[str, list[float]], bool]:
    """Each contender's latencies (ms) at one layout and size, and whether they pair up by round.
    Rows that carry their round (`_latency_node` sends one message per contender a round): the
    rounds every contender has, in order, so that the i-th latency of each was measured in the
    same round (a message lost drops its round for all of them): paired. Rows without: each
    contender's own, as received: not paired."""
    picked = {
        c: [r for r in rows if r["layout"] == layout and r["size_mb"] == size_mb and r["contender"] == c]
        for c in contenders
    }
    if all("round" in r for found in picked.values() for r in found):
        by_round = {c: {r["round"]: r["latency_ns"] / 1e6 for r in found} for c, found in picked.items()}
        common = sorted(set.intersection(*(set(latencies) for latencies in by_round.values())))
        return {c: [latencies[k] for k in common] for c, latencies in by_round.items()}, True
    return {c: [r["latency_ns"] / 1e6 for r in found] for c, found in picked.items()}, False


def judged_intervals(
    samples: dict[str, list[float]], *figures, paired: bool = False
) -> list[tuple[float, float] | None]:
    """For each `figure(medians)` (a function of the contenders' resampled medians, numpy arrays
    by name), its 95% interval over resamples of this run's messages (`paired`: of its rounds,
    drawn whole, `round_samples`: a round's load, shared by its contenders, stays out of a figure
    that compares them); all None when a contender has fewer than INTERVAL_MIN_MESSAGES."""
    if min(len(values) for values in samples.values()) < INTERVAL_MIN_MESSAGES:
        return [None] * len(figures)
    medians = resampled_medians(samples, paired=paired)
    return [interval(figure(medians)) for figure in figures]


def interval_text(found: tuple[float, float] | None, fmt: str, unit: str = "") -> str:
    if found is None:
        return f"{INTERVAL}: too few messages (under {INTERVAL_MIN_MESSAGES} a contender)"
    return f"{INTERVAL} {found[0]:{fmt}} to {found[1]:{fmt}}{unit}"


def p50_ms(rows: list[dict]) -> float:
    return statistics.median(r["latency_ns"] for r in rows) / 1e6


def percentile_ms(rows: list[dict], q: int) -> float:
    """The q-th percentile (1 to 99) of the rows' latencies, in ms."""
    values = [r["latency_ns"] / 1e6 for r in rows]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def points(rows: list[dict], sizes_mb: list[int]) -> list[dict]:
    """One row per layout, contender and size: what the plots draw (latency against size)."""
    out = []
    for layout, contenders in LAYOUTS.items():
        for size in sizes_mb:
            for c in contenders:
                sel = [r for r in rows if r["layout"] == layout and r["size_mb"] == size and r["contender"] == c]
                if sel:
                    out.append(
                        {
                            "layout": layout,
                            "contender": c,
                            "size_mb": size,
                            "messages": len(sel),
                            "p50_ms": p50_ms(sel),
                            "p10_ms": percentile_ms(sel, 10),
                            "p90_ms": percentile_ms(sel, 90),
                            "baseline": c == BASELINE[layout],
                        }
                    )
    return out


def report(rows: list[dict], sizes_mb: list[int]) -> tuple[dict, list[dict]]:
    print("End-to-end latency through dora, p50 in ms (ratio to the baseline measured in the same run)")
    print(
        f"{'layout':14s}{'size':>7s}  "
        + "  ".join(f"{c:>24s}" for c in ["baseline", "tensor_codec", "pa.array pattern"])
    )
    summary = {}
    verdicts = []
    for layout, contenders in LAYOUTS.items():
        for size in sizes_mb:
            lat = {}
            for c in contenders:
                sel = [r for r in rows if r["layout"] == layout and r["size_mb"] == size and r["contender"] == c]
                lat[c] = p50_ms(sel) if sel else float("nan")
            base = lat[BASELINE[layout]]
            tc_ratio = lat["tc"] / base
            pa_ratio = lat["tc"] / lat["pa.array"]
            # How far each ratio could have moved by the luck of which messages were slow.
            named = dict.fromkeys(("tc", "pa.array", BASELINE[layout]))  # in order: the draws are seeded
            samples, paired = round_samples(rows, layout, size, named)
            tc_interval, pa_interval = judged_intervals(
                samples,
                lambda m: m["tc"] / m[BASELINE[layout]],
                lambda m: m["tc"] / m["pa.array"],
                paired=paired,
            )
            summary[f"{layout}/{size}MB"] = {**lat, "tc/baseline": tc_ratio, "tc/pa.array": pa_ratio}
            cells = [
                f"{BASELINE[layout]} {base:7.2f}",
                f"{lat['tc']:7.2f} ({tc_ratio:4.2f}x)",
                f"{lat['pa.array']:7.2f} (tc {pa_ratio:4.2f}x)",
            ]
            print(f"{layout:14s}{size:>5d}MB  " + "  ".join(f"{c:>24s}" for c in cells))
            if BASELINE[layout] == "raw":
                verdicts.append(
                    goal(
                        f"{layout} {size} MB: tc within 1.2x of send_output_raw",
                        tc_ratio,
                        "<=",
                        1.2,
                        "x",
                        f"ratio {tc_ratio:.2f}, {interval_text(tc_interval, '.2f')}",
                    )
                )
            else:
                verdicts.append(
                    goal(
                        f"{layout} {size} MB: tc faster than contiguous()+raw",
                        tc_ratio,
                        "<",
                        1.0,
                        "x",
                        f"ratio {tc_ratio:.2f}, {interval_text(tc_interval, '.2f')}",
                    )
                )
            issue = " end to end (issue 18)" if (layout, size) == ("contiguous", 1) else ""
            verdicts.append(
                goal(
                    f"{layout} {size} MB{issue}: tc not slower than pa.array pattern",
                    pa_ratio,
                    "<=",
                    1.0,
                    "x",
                    f"ratio {pa_ratio:.2f}, {interval_text(pa_interval, '.2f')}",
                )
            )
    print()
    table: dict = {}
    verdicts += primitives(table, rows, sizes_mb)
    print()
    print_goals(verdicts)
    bad = [r for r in rows if not r["ok"]]
    print(f"  messages measured: {len(rows)}, wrong shape or dtype: {len(bad)}")
    return summary, table, verdicts


# --profile: where a tc message's time goes inside the real sender and receiver processes (caches
# are cold there between messages, unlike in a tight loop), per size, sampled by py-spy.
SAMPLE_HZ = 499  # py-spy pauses the process for each sample (slower messages): the shares count
PROFILED = {  # side -> the frames whose time is tc's (function, file) and what they are
    "sender": [("send", "output.py")],  # tensor_codec/dora/output.py: Output.send
    "receiver": [("receive", "receive.py"), ("__exit__", "lifetimes.py")],  # tensor_codec/dora/receive.py
}


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return found if Path(found).exists() else None


def profile(sizes_mb: list[int], reps: int, warmup: int, pool: str, out: Path, top: int) -> dict:
    """One dataflow per size, tc alone, both nodes under py-spy (--native: dora's and torch's C
    frames too); the raw samples in `out`, and per side the time per message in tc's frames and
    the leaf frames that take the most of it."""
    spy = py_spy()
    if spy is None:
        sys.exit("--profile needs py-spy (the `profile` extra: make install, or pip install py-spy)")
    out = out.resolve()  # the nodes run in the dataflow's own folder
    out.mkdir(parents=True, exist_ok=True)
    found = {}
    for size in sizes_mb:

        def sampler(role, path, args, size=size):
            record = out / f"{role}-{size}MB.txt"
            return spy, f"record --native --rate {SAMPLE_HZ} --format raw --output {record} -- {path} {args}"

        rows = run([size], reps, warmup, pool, {"contiguous": ["tc"]}, sampler)
        messages = len(rows) + warmup
        print(f"\n{size} MB, {len(rows)} messages timed (p50 {p50_ms(rows):.2f} ms under the sampler)")
        for role, roots in PROFILED.items():
            per_message, leaves = attribute(out / f"{role}-{size}MB.txt", roots, messages)
            found[f"{role}/{size}MB"] = {"us_per_message": per_message, "top": leaves[:top]}
            print(f"  {role}: {per_message:.0f} us per message in {', '.join(f'{f} ({m})' for f, m in roots)}")
            for frame, us in leaves[:top]:
                print(f"    {us:7.1f} us {100 * us / max(per_message, 1e-9):3.0f}%  {frame}")
    return found


def attribute(path: Path, roots: list[tuple[str, str]], messages: int) -> tuple[float, list[tuple[str, float]]]:
    """py-spy's raw samples (one stack per line, frames joined by ';', then the count) -> the time
    per message under any of `roots`, and where it is: the innermost Python frame with the
    native frame it was in (libc's memcpy shows as an address), most first. Samples in an import
    (the first message's, once) are left out."""
    frame_name = re.compile(r"^(.+?) \((?:.*/)?([^/:]+)(?::\d+)?\)$")
    inside: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        names = []
        for text in stack.split(";"):
            m = frame_name.match(text)
            names.append((m.group(1), m.group(2)) if m else (text, ""))
        if not any(name in roots for name in names) or any(f == "_find_and_load" for f, _ in names):
            continue
        total += int(count)
        python = [f"{f} ({m})" for f, m in names if m.endswith(".py")]
        native = names[-1] if not names[-1][1].endswith(".py") else None
        where = python[-1] if python else "?"
        if native is not None:
            where += f" > {native[0]}" + (f" ({native[1]})" if native[1] else "")
        inside[where] = inside.get(where, 0) + int(count)
    us = 1e6 / SAMPLE_HZ / max(messages, 1)
    return total * us, sorted(((f, n * us) for f, n in inside.items()), key=lambda fn: -fn[1])


# --split: tc's cost over the floor (send_output) taken apart, per size (bench/_latency_node.py,
# SPLIT): dora carrying tc's metadata (and wire format 1's three keys), tc's sender, tc's
# receiver, each added to the floor alone.
SPLIT_CONTENDERS = [
    "send_output",
    "send_output+tc-metadata",
    "send_output+v1-keys",
    "tc.send-only",
    "tc.receive-only",
    "tc",
]


def _p50_us(rows: list[dict], key: str) -> float | None:
    """The p50 of the rows' `key` (ns) in us, over the rows that have it (None if none has)."""
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) / 1e3 if values else None


def _signed_us(us: float | None) -> str:
    """A difference in us as the split prints it, "n/a" where it was not measured."""
    return "  n/a" if us is None else f"{us:+5.1f}"


def split(sizes_mb: list[int], reps: int, warmup: int, pool: str) -> tuple[dict, int]:
    """Contiguous tensors through one dataflow, the floor and tc's parts interleaved: per size,
    each contender's p50 latency over the floor's, its receiver's p50 time to a usable tensor,
    its sender's p50 CPU time in the send over the floor's (what the sender's thread ran: a
    sender that waited for a core does not count the wait, which the latency does), and the
    part of that before dora's call over the floor's (the sender's own work, without dora's
    copy, which moves the whole by several microseconds from message to message).
    -> (the table, as printed, how many messages arrived with a wrong shape or dtype)."""
    rows = run(sizes_mb, reps, warmup, pool, {"contiguous": SPLIT_CONTENDERS}, time_dora_call=True)
    print(
        "tc's cost taken apart, contiguous, p50: latency over the floor (send_output), the receive's own time "
        "(rx), the sender's CPU time in the send over the floor's (tx) and the part of it before dora's call "
        "over the floor's (pre)"
    )
    print(f"{'size':>6s}  " + "  ".join(f"{c:>42s}" for c in SPLIT_CONTENDERS))
    table: dict = {}
    for size in sizes_mb:
        sel = {c: [r for r in rows if r["size_mb"] == size and r["contender"] == c] for c in SPLIT_CONTENDERS}
        floor = {key: _p50_us(sel["send_output"], key) for key in ("latency_ns", "send_cpu_ns", "before_dora_ns")}
        cells = {}
        for c, mine in sel.items():
            latency, send_cpu, before_dora = (
                _p50_us(mine, key) for key in ("latency_ns", "send_cpu_ns", "before_dora_ns")
            )
            cells[c] = {
                "latency_us": latency,
                "over_floor_us": latency - floor["latency_ns"],
                "receive_us": _p50_us(mine, "receive_ns"),
                "send_cpu_us": send_cpu,
                "send_cpu_over_floor_us": send_cpu - floor["send_cpu_ns"],
                "before_dora_us": before_dora,
                "before_dora_over_floor_us": (
                    None
                    if before_dora is None or floor["before_dora_ns"] is None
                    else before_dora - floor["before_dora_ns"]
                ),
            }
        table[f"{size}MB"] = cells
        print(
            f"{size:>4d}MB  "
            + "  ".join(
                f"{v['over_floor_us']:+6.1f} us (rx {v['receive_us']:5.1f}, tx {v['send_cpu_over_floor_us']:+5.1f}, "
                f"pre {_signed_us(v['before_dora_over_floor_us'])})"
                for v in cells.values()
            )
        )
    floors = ", ".join(f"{size} {cells['send_output']['latency_us']:.0f} us" for size, cells in table.items())
    wrong = sum(1 for r in rows if not r["ok"])
    print(f"  (the floor's latency: {floors}; messages measured: {len(rows)}, wrong shape or dtype: {wrong})")
    return table, wrong


OWN_COST_GOAL_US = 20.0  # issue 33: tc's own cost over the best dora primitive, contiguous 1 MB
PICK_TOLERANCE = 1.05  # the primitive tc picks may be this much slower than the other (noise)


def primitives(table: dict, rows: list[dict], sizes_mb: list[int]) -> list[dict]:
    """dora's two primitives side by side (send_output_raw, send_output; the latter's bytes typed
    as the tensor, Float32 here, and as UInt8), tc forced onto each, and what tc picks by size
    (an Output's `copies_below`, by default tensor_codec.dora.output.DORA_COPIES_BELOW) and as
    which type (the tensor's own, here): the measurements those rules are made from, kept in the
    run that checks them."""
    try:
        from tensor_codec.dora.output import DORA_COPIES_BELOW as copies_below
    except ImportError:  # a tensor_codec from before its dora package (compare_revisions.py --scripts
        copies_below = 0  # current): its choice is not read here, and shows as send_output_raw

    def p50(size, contender):
        sel = [r for r in rows if r["layout"] == "contiguous" and r["size_mb"] == size and r["contender"] == contender]
        return p50_ms(sel) if sel else float("nan")

    print("dora's primitives, contiguous, p50 in ms: tc's own cost is tc minus the faster primitive")
    print(
        f"{'size':>6s}  {'send_output_raw':>15s}  {'send_output':>11s}  {'(as UInt8)':>10s}  {'tc':>6s}  "
        f"{'own cost':>9s}  {'tc:send_output':>14s}  {'tc:send_output_raw':>18s}  {'tc picks':>15s}"
    )
    verdicts = []
    for size in sizes_mb:
        raw, copied, tc = p50(size, "raw"), p50(size, "send_output"), p50(size, "tc")
        as_uint8 = p50(size, "send_output:uint8")
        forced = {"send_output": p50(size, "tc:send_output"), "send_output_raw": p50(size, "tc:send_output_raw")}
        picked = "send_output" if size * MB < copies_below else "send_output_raw"
        other = "send_output_raw" if picked == "send_output" else "send_output"
        own_us = (tc - min(raw, copied)) * 1e3
        samples, paired = round_samples(rows, "contiguous", size, ("tc", "raw", "send_output"))
        (own_interval,) = judged_intervals(
            samples,
            lambda m: (m["tc"] - np.minimum(m["raw"], m["send_output"])) * 1e3,
            paired=paired,
        )
        table[f"{size}MB"] = {
            "send_output_raw": raw,
            "send_output": copied,
            "send_output:uint8": as_uint8,
            "tc": tc,
            "own_cost_us": own_us,
            "own_cost_us_interval": None if own_interval is None else list(own_interval),
            "picked": picked,
            **{f"tc:{k}": v for k, v in forced.items()},
        }
        print(
            f"{size:>4d}MB  {raw:15.3f}  {copied:11.3f}  {as_uint8:10.3f}  {tc:6.3f}  {own_us:6.0f} us  "
            f"{forced['send_output']:14.3f}  {forced['send_output_raw']:18.3f}  {picked:>15s}"
        )
        verdicts.append(
            goal(
                f"contiguous {size} MB: dora's send_output carries the bytes typed as the tensor (Float32, tc's "
                "choice) no slower than as UInt8",
                copied / as_uint8,
                "<=",
                PICK_TOLERANCE,
                "x",
                f"Float32 {copied:.3f} ms, UInt8 {as_uint8:.3f} ms",
            )
        )
        ratio = forced[picked] / forced[other]
        verdicts.append(
            goal(
                f"contiguous {size} MB: tc picks the faster of dora's primitives ({picked})",
                ratio,
                "<=",
                PICK_TOLERANCE,
                "x",
                f"{picked} {forced[picked]:.3f} ms, {other} {forced[other]:.3f} ms",
            )
        )
        if size == 1:
            verdicts.append(
                goal(
                    f"contiguous 1 MB: tc's own cost over the faster dora primitive under {OWN_COST_GOAL_US:g} us",
                    own_us,
                    "<",
                    OWN_COST_GOAL_US,
                    "us",
                    f"{own_us:.0f} us, {interval_text(own_interval, '.0f', ' us')}",
                )
            )
    return verdicts


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,4,16,64", help="sizes in MB (default 1,4,16,64)")
    parser.add_argument(
        "--reps",
        type=int,
        default=15,
        help="messages per contender at the largest size; a smaller size sends as many more as its messages "
        "are smaller (the same bytes at every size: 15 -> 960 at 1 MB of 1,4,16,64) (default 15); judge the "
        "goals at 16 and 64 MB with 160: 40 left their intervals 9 to 27 points wide (bench/README.md, eleventh round)",
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--pool", default="512MB", help="shared_memory_pool_size of the sender, same for every contender"
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        type=Path,
        help="instead: sample tc's sender and receiver with py-spy, one dataflow per size, raw samples into DIR",
    )
    parser.add_argument("--top", type=int, default=8, help="with --profile: frames listed per side (default 8)")
    parser.add_argument(
        "--split",
        action="store_true",
        help="instead: tc's cost over the floor taken apart (its metadata carried by dora, its sender, its receiver)",
    )
    add_json_option(parser, "dora_latency")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if min(sizes) < 1 or args.reps < 1:
        parser.error(f"--sizes and --reps: expected whole numbers from 1, got --sizes {args.sizes} --reps {args.reps}")
    if args.profile is not None:
        found = profile(sizes, args.reps, args.warmup, args.pool, args.profile, args.top)
        figures = {"sizes_mb": sizes, "reps": args.reps, "pool": args.pool, "sample_hz": SAMPLE_HZ, "profile": found}
        return save("dora_latency_profile", "none: where tc's time goes, sampled", figures, args.json)
    if args.split:
        found, wrong = split(sizes, args.reps, args.warmup, args.pool)
        figures = {
            "sizes_mb": sizes,
            "reps": args.reps,
            "messages_per_contender": messages_per_contender(sizes, args.reps),
            "pool": args.pool,
            "split": found,
            "wrong": wrong,
        }
        return save(
            "dora_latency_split", "the floor: send_output of the same bytes, typed as the tensor", figures, args.json
        )
    rows = run(sizes, args.reps, args.warmup, args.pool)
    summary, table, goals = report(rows, sizes)
    figures = {
        "sizes_mb": sizes,
        "reps": args.reps,
        "messages_per_contender": messages_per_contender(sizes, args.reps),
        "pool": args.pool,
        "baselines": BASELINE,
        "rows": points(rows, sizes),
        "summary": summary,
        "primitives": table,
        "wrong": sum(1 for r in rows if not r["ok"]),
        "goals": goals,
    }
    return save("dora_latency", BASELINE_TEXT, figures, args.json)


if __name__ == "__main__":
    main()
