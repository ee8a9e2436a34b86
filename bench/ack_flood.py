"""The tensor sender's throughput under a sustained flood of junk acks (issue 60), against its
clean throughput measured in the same run, in real dora dataflows: the node fuzzer's sender flow
(tools/fuzz_nodes: a tc-tensor-sender acknowledged by a tc-tensor-receiver, which verifies every
message, and by the hostile acker, which acknowledges every message too), run in rounds of two,
clean and flooded, which goes first alternating. Flooded, the acker also sends FLOOD_RATE acks of
a stream nothing sent per second, steadily, over the middle half of the run. The figure: the
sender's messages per second over that span, flooded / clean, the median of the rounds.

Goal: at least 0.5 of the clean rate with at least 20,000 junk acks a second taken (the flood
goes at 22,000 a second by default: what is taken over the span is a little less).

    python bench/ack_flood.py [--rounds 3] [--real 4000] [--flood-rate 22000] [--json PATH]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tools/: the fuzzer's flows and checks

from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save  # noqa: E402

BASELINE = "the same dataflow without the flood, in the same round"
GOAL_RATIO = 0.5
GOAL_FLOOD_PER_S = 20_000
TIMEOUT_S = 180.0


def run_once(workdir: Path, real: int, flood_rate: int, seed: int) -> dict:
    """One sender dataflow (flooded when `flood_rate`); -> its figures: messages/s over the
    flood's span and over the run, junk acks/s taken, or why it failed."""
    from tools.fuzz_nodes.checks import check_run
    from tools.fuzz_nodes.dora_run import run_flow
    from tools.fuzz_nodes.flows import FlowParams, write_flow

    params = FlowParams(seed=seed, hostile=0, flood_rate=flood_rate, real=real, workdir=workdir)
    result = check_run("sender", "sender", run_flow(write_flow("sender", params), TIMEOUT_S), params)
    span = result.figures.get("flood_span") or {}
    return {
        "ok": result.ok,
        "problems": result.problems,
        "span_per_s": span.get("per_s"),
        "run_per_s": result.figures.get("per_s"),
        "flood_acks_per_s": result.figures.get("flood_acks_per_s"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="clean and flooded runs each (default %(default)s)")
    parser.add_argument("--real", type=int, default=4000, help="messages of 4 KB a run (default %(default)s)")
    parser.add_argument(
        "--flood-rate", type=int, default=22_000, help="junk acks per second, flooded (default %(default)s)"
    )
    add_json_option(parser, "ack_flood")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.real < 12 or args.flood_rate < 1:
        parser.error("--rounds >= 1, --real >= 12 (past the sender's window), --flood-rate >= 1")

    root = Path(tempfile.mkdtemp(prefix="tc-ack-flood-"))
    rows = []
    try:
        for r in range(args.rounds):
            runs = {}
            for kind in ("clean", "flooded") if r % 2 == 0 else ("flooded", "clean"):
                rate = args.flood_rate if kind == "flooded" else 0
                runs[kind] = run_once(root / f"{r}-{kind}", args.real, rate, seed=r)
            clean, flooded = runs["clean"], runs["flooded"]
            ratio = (
                round(flooded["span_per_s"] / clean["span_per_s"], 3)
                if clean["span_per_s"] and flooded["span_per_s"]
                else None
            )
            rows.append({"round": r, "clean": clean, "flooded": flooded, "ratio": ratio})
            print(
                f"round {r}: clean {clean['span_per_s'] or '-'} msg/s, flooded {flooded['span_per_s'] or '-'} msg/s "
                f"with {flooded['flood_acks_per_s'] or '-'} junk acks/s taken: {ratio if ratio else 'n/a'}x"
                + ("" if clean["ok"] and flooded["ok"] else f"  FAILED: {clean['problems'] + flooded['problems']}"),
                flush=True,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    ratios = [row["ratio"] for row in rows if row["ratio"] is not None]
    taken = [row["flooded"]["flood_acks_per_s"] for row in rows if row["flooded"]["flood_acks_per_s"]]
    ratio = statistics.median(ratios) if ratios else 0.0
    flood_per_s = statistics.median(taken) if taken else 0.0
    print(
        f"tc-tensor-sender, {args.real} messages of 4 KB, a flood of {args.flood_rate} junk acks/s: flooded / clean "
        f"over the flood's span, median of {len(ratios)} rounds: {ratio:.2f}x ({flood_per_s:.0f} junk acks/s taken)"
    )
    goals = [
        goal(
            "sender throughput under the flood",
            ratio,
            ">=",
            GOAL_RATIO,
            "x",
            f"{ratio:.2f}x of the clean rate over the flood's span, median of {len(ratios)} rounds",
        ),
        goal(
            "junk acks taken per second",
            flood_per_s,
            ">=",
            GOAL_FLOOD_PER_S,
            "acks/s",
            f"{flood_per_s:.0f} junk acks/s taken, median of {len(taken)} rounds",
        ),
    ]
    print_goals(goals)
    save(
        "ack_flood",
        BASELINE,
        {
            "real": args.real,
            "flood_rate": args.flood_rate,
            "rounds": rows,
            "ratio": ratio,
            "flood_acks_per_s": flood_per_s,
            "goals": goals,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
