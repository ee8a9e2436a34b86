"""End-to-end latency through a real dora dataflow: tc.send / tc.receive against the ways people
send tensors today, every contender with the same shared-memory pool, measured in one run.

Goals (issue 2), each printed as a ratio of p50 latencies:
* contiguous tensors, 1 MB to 64 MB: tc within 1.2x of plain `send_output_raw` of the same bytes;
* non-contiguous (a transpose, a strided crop): tc faster than `t.contiguous()` + that raw send;
* every case: tc never slower than `pa.array(t.contiguous().numpy().ravel())` + `send_output`,
  received with `torch.from_numpy(...).reshape(...)`; issue 18 names contiguous 1 MB end to end
  in particular (tc / pa.array p50 <= 1.0x; 1.06 to 1.18x before its redesign).

One message is in flight at a time (the receiver acks each), so latency is not queueing; the
contenders are interleaved round by round so drift in machine load hits them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save  # noqa: E402

LAYOUTS = {
    "contiguous": ["raw", "tc", "pa.array"],
    "transposed": ["contiguous+raw", "tc", "pa.array"],
    "strided_crop": ["contiguous+raw", "tc", "pa.array"],
}
BASELINE = {"contiguous": "raw", "transposed": "contiguous+raw", "strided_crop": "contiguous+raw"}
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
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [dora_cli(), "run", str(tmp / "dataflow.yml")], cwd=tmp, env=env, capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0 or not results.exists():
        sys.exit(f"dataflow failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


def run(sizes_mb: list[int], reps: int, warmup: int, pool: str) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="tc-bench-") as tmp:
        tmp = Path(tmp)
        results = tmp / "results.json"
        plan = {"sizes_mb": sizes_mb, "reps": reps, "warmup": warmup, "layouts": LAYOUTS}

        def node(role, **kw):
            return {
                "id": role,
                "path": sys.executable,
                "args": f"-u {HERE / '_latency_node.py'} {role}",
                **kw,
            }

        flow = {
            "nodes": [
                node(
                    "sender",
                    shared_memory_pool_size=pool,
                    inputs={"tick": "dora/timer/millis/100", "ack": "receiver/ack"},
                    outputs=["out", "done"],
                    env={"PLAN": json.dumps(plan)},
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
        return json.loads(results.read_text())


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
            summary[f"{layout}/{size}MB"] = {**lat, "tc/baseline": tc_ratio, "tc/pa.array": pa_ratio}
            cells = [
                f"{BASELINE[layout]} {base:7.2f}",
                f"{lat['tc']:7.2f} ({tc_ratio:4.2f}x)",
                f"{lat['pa.array']:7.2f} (tc {pa_ratio:4.2f}x)",
            ]
            print(f"{layout:14s}{size:>5d}MB  " + "  ".join(f"{c:>24s}" for c in cells))
            if layout == "contiguous":
                verdicts.append(
                    goal(
                        f"contiguous {size} MB: tc within 1.2x of send_output_raw",
                        tc_ratio,
                        "<=",
                        1.2,
                        "x",
                        f"ratio {tc_ratio:.2f}",
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
                        f"ratio {tc_ratio:.2f}",
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
                    f"ratio {pa_ratio:.2f}",
                )
            )
    print()
    print_goals(verdicts)
    bad = [r for r in rows if not r["ok"]]
    print(f"  messages measured: {len(rows)}, wrong shape or dtype: {len(bad)}")
    return summary, verdicts


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,4,16,64", help="sizes in MB (default 1,4,16,64)")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--pool", default="512MB", help="shared_memory_pool_size of the sender, same for every contender"
    )
    add_json_option(parser, "dora_latency")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = run(sizes, args.reps, args.warmup, args.pool)
    summary, goals = report(rows, sizes)
    figures = {
        "sizes_mb": sizes,
        "reps": args.reps,
        "pool": args.pool,
        "baselines": BASELINE,
        "rows": points(rows, sizes),
        "summary": summary,
        "wrong": sum(1 for r in rows if not r["ok"]),
        "goals": goals,
    }
    return save("dora_latency", BASELINE_TEXT, figures, args.json)


if __name__ == "__main__":
    main()
