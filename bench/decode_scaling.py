"""Receiving is O(1) in tensor size: decoding a 64 MB tensor vs a 1 KB one (zero-copy).

Goal (issue 2): the 64 MB decode within 2x of the 1 KB decode. Messages of 4 KiB and more are
viewed in place; the 1 KB message is under dora's 4 KiB shared-memory threshold and is copied
(one 1 KB memmove), which is what a real receiver does with it too. `copy=True` is shown for
scale: it is O(size).

    python bench/decode_scaling.py [--batch 500] [--batches 15] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _goals import goal  # noqa: E402
from _results import add_json_option, save  # noqa: E402
from _timing import fmt_us, per_call_seconds  # noqa: E402

import tensor_codec as tc  # noqa: E402

GOAL_RATIO = 2.0
BASELINE = "the decode of a 1 KB tensor"
SIZES = {"1KB": 1 << 10, "64MB": 64 << 20}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=500, help="decodes per timed batch (default 500)")
    parser.add_argument("--batches", type=int, default=15, help="timed batches, the median counts (default 15)")
    add_json_option(parser, "decode_scaling")
    args = parser.parse_args(argv)
    messages = {name: tc.encode(torch.rand(nbytes // 4)) for name, nbytes in SIZES.items()}  # float32
    times = {}
    for name, (value, metadata) in messages.items():

        def decode_and_release(value=value, metadata=metadata):
            with tc.scope():
                return tc.decode(value, metadata)

        times[name] = per_call_seconds(decode_and_release, batch=args.batch, batches=args.batches)
    value, metadata = messages["64MB"]
    copied = per_call_seconds(
        lambda: tc.decode(value, metadata, copy=True), batch=3, batches=min(5, args.batches), warmup=1
    )
    ratio = times["64MB"] / times["1KB"]
    print(f"Decode scaling (decode + release in a scope; median of {args.batches} batches of {args.batch})")
    print(f"  1 KB tensor:  {fmt_us(times['1KB'])}")
    print(
        f"  64 MB tensor: {fmt_us(times['64MB'])}   {ratio:.2f}x the 1 KB decode   goal <= {GOAL_RATIO:.1f}x: "
        f"{'met' if ratio <= GOAL_RATIO else 'NOT met'}"
    )
    print(f"  (64 MB with copy=True, for scale: {fmt_us(copied)} = {copied / times['1KB']:.0f}x)")
    rows = [
        {
            "case": f"{name} decode",
            "bytes": SIZES[name],
            "copy": False,
            "us": times[name] * 1e6,
            "ratio": times[name] / times["1KB"],
        }
        for name in SIZES
    ]
    rows.append(
        {
            "case": "64MB decode, copy=True",
            "bytes": SIZES["64MB"],
            "copy": True,
            "us": copied * 1e6,
            "ratio": copied / times["1KB"],
        }
    )
    goals = [
        goal(f"64 MB decode within {GOAL_RATIO:g}x of the 1 KB decode", ratio, "<=", GOAL_RATIO, "x", f"{ratio:.2f}x")
    ]
    figures = {
        "1KB_us": times["1KB"] * 1e6,
        "64MB_us": times["64MB"] * 1e6,
        "ratio": ratio,
        "copy_64MB_us": copied * 1e6,
        "goal_ratio": GOAL_RATIO,
        "rows": rows,
        "goals": goals,
    }
    return save("decode_scaling", BASELINE, figures, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
