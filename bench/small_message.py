"""Encode + decode of a small TVTensor (1 KB BoundingBoxes, 64 x 4 float32) in one process.

Goals (issue 18): a header seen before under 15 microseconds, a header never seen before under
40 microseconds (they replace issue 2's single goal of 50 us for both). Printed against a baseline
measured in the same run: the bare bytes of the same tensor through the common
`pa.array(t.numpy().ravel())` / `torch.from_numpy(...).reshape(...)` pattern, which carries no
dtype table, no attributes, no validation. "cold" gives every message a header the receiver has
not seen (a new canvas size each time), "warm" repeats one header, as a stream of same-shaped
messages does. `python bench/compare_revisions.py` runs this script in two revisions of the tree
and compares them.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import add_json_option  # noqa: E402  (light: torch is imported after the arguments)

GOAL_WARM_US = 15.0  # issue 18: a header seen before (a stream of same-shaped messages)
GOAL_COLD_US = 40.0  # issue 18: a header never seen before
BASELINE = "pa.array + torch.from_numpy of the bare bytes (no dtype, shape or attributes)"
CASES = {  # name in the results -> what it is
    "baseline": "baseline: pa.array + from_numpy, bare bytes",
    "warm": "tc, header seen before (stream)",
    "cold": "tc, new header every message",
    "wrap_only": "tv_tensors.wrap alone (for scale)",
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=2000, help="calls per timed batch (default 2000)")
    parser.add_argument("--batches", type=int, default=15, help="timed batches, the median counts (default 15)")
    add_json_option(parser, "small_message")
    return parser.parse_args(argv)


def make_cases(calls: int) -> dict:
    """CASES' name -> the call it times (bench/instructions.py counts the same calls). `calls`:
    how many times "cold" may be called, each with a header not seen before."""
    import pyarrow as pa
    import torch
    from torchvision import tv_tensors

    import tensor_codec as tc

    boxes = tv_tensors.BoundingBoxes(torch.rand(64, 4), format="XYXY", canvas_size=(480, 640))
    assert boxes.numel() * boxes.element_size() == 1024

    def warm():
        value, metadata = tc.encode(boxes)
        return tc.decode(value, metadata)

    plain = boxes.as_subclass(torch.Tensor)
    # Distinct canvas sizes, built beforehand, one per call (warm-up included), so every message
    # brings a header not seen before.
    distinct = itertools.cycle([tv_tensors.wrap(plain, like=boxes, canvas_size=(h, 640)) for h in range(1, calls + 1)])

    def cold():
        value, metadata = tc.encode(next(distinct))
        return tc.decode(value, metadata)

    def baseline():
        value = pa.array(plain.numpy().ravel())
        return torch.from_numpy(value.to_numpy(zero_copy_only=False).copy()).reshape(64, 4)

    def wrap_only():  # what rebuilding the TVTensor alone costs, for context
        return tv_tensors.wrap(plain, like=boxes, canvas_size=(480, 640))

    cases = {"baseline": baseline, "warm": warm, "cold": cold, "wrap_only": wrap_only}
    assert list(cases) == list(CASES)
    return cases


def main(argv=None) -> dict:
    args = parse_args(argv)  # before torch: --help answers at once

    from _goals import goal, print_goals
    from _results import save
    from _timing import fmt_us, per_call_seconds

    batch, batches, warmup = args.batch, args.batches, 3
    cases = make_cases((warmup + batches) * batch + 1)
    timing = dict(batch=batch, batches=batches, warmup=warmup)
    results = {name: per_call_seconds(call, **timing) for name, call in cases.items()}
    base = results["baseline"]
    print(f"Small TVTensor: encode + decode of 1 KB BoundingBoxes (median of {batches} batches of {batch})")
    print(f"  baseline pa.array + from_numpy, bare bytes: {fmt_us(results['baseline'])}")
    print(
        f"  tensor_codec, header seen before (stream):  {fmt_us(results['warm'])}   {results['warm'] / base:.2f}x "
        "baseline"
    )
    print(
        f"  tensor_codec, new header every message:     {fmt_us(results['cold'])}   {results['cold'] / base:.2f}x "
        "baseline"
    )
    print(f"  (tv_tensors.wrap alone, for scale:          {fmt_us(results['wrap_only'])})")
    goals = [
        goal(
            f"tc encode + decode of 1 KB BoundingBoxes, {name}, under {target:g} us",
            results[key] * 1e6,
            "<",
            target,
            "us",
            f"{results[key] * 1e6:.1f} us, {results[key] / base:.2f}x the baseline",
        )
        for key, name, target in (
            ("warm", "header seen before", GOAL_WARM_US),
            ("cold", "header never seen before", GOAL_COLD_US),
        )
    ]
    print("Goals (issue 18):")
    print_goals(goals)
    rows = [{"case": key, "label": CASES[key], "us": results[key] * 1e6, "ratio": results[key] / base} for key in CASES]
    figures = {
        "batch": batch,
        "batches": batches,
        "goal_us": GOAL_WARM_US,
        "goal_cold_us": GOAL_COLD_US,
        "rows": rows,
        "goals": goals,
        **{f"{k}_us": v * 1e6 for k, v in results.items()},
    }
    return save("small_message", BASELINE, figures, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
