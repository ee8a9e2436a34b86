"""What refusing non-zero padding costs a receiver (issue 14): tc.decode of host messages whose
leaves leave gaps (odd sizes, so every leaf but the first is preceded by padding), with the
check, against the same decode with the check switched off, measured in the same run.

    python bench/padding_check.py [--rounds 5] [--batch-leaves 2000]
                                  [--json PATH (default out/bench/padding_check.json)]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save  # noqa: E402
from _timing import fmt_us, per_call_seconds  # noqa: E402

import tensor_codec as tc  # noqa: E402
from tensor_codec.wire.buffer import Padding  # noqa: E402

BASELINE = "the same decode with the padding check switched off"
GOAL_RATIO = 1.10
CASES = [  # (leaves, bytes per leaf)
    (2, 3),
    (16, 1001),
    (256, 33),
    (1024, 1),
    (8, 1_000_001),
]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="interleaved rounds with and without the check, the fastest counts (default 5)",
    )
    parser.add_argument(
        "--batch-leaves",
        type=int,
        default=2000,
        help="leaves decoded per timed batch: a message of k leaves is decoded N // k times, at least once "
        "(default 2000)",
    )
    add_json_option(parser, "padding_check")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.batch_leaves < 1:
        parser.error("--rounds and --batch-leaves: expected at least 1")
    original = Padding.check
    rows = []
    print(f"{'message':34s} {'with check':>12s} {'without':>12s} {'ratio':>6s}")
    for count, size in CASES:
        value, metadata = tc.encode([torch.ones(size, dtype=torch.uint8) for _ in range(count)])
        batch = max(1, args.batch_leaves // count)

        def decode():
            tc.decode(value, metadata, copy=True)

        # Interleaved rounds, the fastest of each kept: drift on a shared machine hits both alike.
        with_check, without = [], []
        for _ in range(args.rounds):
            with_check.append(per_call_seconds(decode, batch=batch, batches=5, warmup=1))
            Padding.check = lambda *a: None  # the baseline: everything else the same
            try:
                without.append(per_call_seconds(decode, batch=batch, batches=5, warmup=1))
            finally:
                Padding.check = original
        with_check, without = min(with_check), min(without)
        ratio = with_check / without
        rows.append(
            {"leaves": count, "leaf_bytes": size, "with_check_s": with_check, "without_s": without, "ratio": ratio}
        )
        print(f"{count:5d} leaves of {size:9d} bytes     {fmt_us(with_check)} {fmt_us(without)} {ratio:6.2f}")
    worst = max(rows, key=lambda r: r["ratio"])
    extra = max(r["with_check_s"] - r["without_s"] for r in rows if r["leaves"] <= 64)
    print(
        f"  up to 64 leaves the check adds at most {extra * 1e6:.1f} us to a message in this run (a dora hop costs 100 "
        "us and more)"
    )
    goals = [
        goal(
            "padding check costs at most 10% of a decode whose header is cached",
            worst["ratio"],
            "<=",
            GOAL_RATIO,
            "x",
            f"worst: {worst['leaves']} leaves of {worst['leaf_bytes']} bytes, {worst['ratio']:.3f}x",
        )
    ]
    print_goals(goals)
    return save("padding_check", BASELINE, {"goal_ratio": GOAL_RATIO, "rows": rows, "goals": goals}, args.json)


if __name__ == "__main__":
    main()
