"""Encode + decode of a small TVTensor (1 KB BoundingBoxes, 64 x 4 float32) in one process.

Goal (issue 2): under 50 microseconds. Printed against a baseline measured in the same run: the
bare bytes of the same tensor through the common `pa.array(t.numpy().ravel())` /
`torch.from_numpy(...).reshape(...)` pattern, which carries no dtype table, no attributes, no
validation. "cold" gives every message a header the receiver has not seen (a new canvas size each
time), "warm" repeats one header, as a stream of same-shaped messages does.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
import torch  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import tensor_codec as tc  # noqa: E402
from _goals import goal  # noqa: E402
from _results import add_json_option, save  # noqa: E402
from _timing import fmt_us, per_call_seconds  # noqa: E402

GOAL_US = 50.0
BASELINE = "pa.array + torch.from_numpy of the bare bytes (no dtype, shape or attributes)"
CASES = {  # name in the results -> what it is
    "baseline": "baseline: pa.array + from_numpy, bare bytes",
    "warm": "tc, header seen before (stream)",
    "cold": "tc, new header every message",
    "wrap_only": "tv_tensors.wrap alone (for scale)",
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=2000, help="calls per timed batch (default 2000)")
    parser.add_argument("--batches", type=int, default=15, help="timed batches, the median counts (default 15)")
    add_json_option(parser, "small_message")
    args = parser.parse_args(argv)
    batch, batches, warmup = args.batch, args.batches, 3
    boxes = tv_tensors.BoundingBoxes(torch.rand(64, 4), format="XYXY", canvas_size=(480, 640))
    assert boxes.numel() * boxes.element_size() == 1024

    def warm():
        value, metadata = tc.encode(boxes)
        return tc.decode(value, metadata)

    plain = boxes.as_subclass(torch.Tensor)
    # Distinct canvas sizes, built beforehand, one per call (warm-up included), so every message
    # brings a header not seen before.
    calls = (warmup + batches) * batch + 1
    distinct = itertools.cycle([tv_tensors.wrap(plain, like=boxes, canvas_size=(h, 640)) for h in range(1, calls + 1)])

    def cold():
        value, metadata = tc.encode(next(distinct))
        return tc.decode(value, metadata)

    def baseline():
        value = pa.array(plain.numpy().ravel())
        return torch.from_numpy(value.to_numpy(zero_copy_only=False).copy()).reshape(64, 4)

    def wrap_only():  # what rebuilding the TVTensor alone costs, for context
        return tv_tensors.wrap(plain, like=boxes, canvas_size=(480, 640))

    timing = dict(batch=batch, batches=batches, warmup=warmup)
    results = {
        "baseline": per_call_seconds(baseline, **timing),
        "warm": per_call_seconds(warm, **timing),
        "cold": per_call_seconds(cold, **timing),
        "wrap_only": per_call_seconds(wrap_only, **timing),
    }
    print(f"Small TVTensor: encode + decode of 1 KB BoundingBoxes (median of {batches} batches of {batch})")
    print(f"  baseline pa.array + from_numpy, bare bytes: {fmt_us(results['baseline'])}")
    print(f"  tensor_codec, header seen before (stream):  {fmt_us(results['warm'])}   {results['warm'] / results['baseline']:.2f}x baseline   goal < {GOAL_US:.0f} us: {'met' if results['warm'] * 1e6 < GOAL_US else 'NOT met'}")
    print(f"  tensor_codec, new header every message:     {fmt_us(results['cold'])}   {results['cold'] / results['baseline']:.2f}x baseline   goal < {GOAL_US:.0f} us: {'met' if results['cold'] * 1e6 < GOAL_US else 'NOT met'}")
    print(f"  (tv_tensors.wrap alone, for scale:          {fmt_us(results['wrap_only'])})")
    base = results["baseline"]
    goals = [goal(f"tc encode + decode of 1 KB BoundingBoxes, {name}, under {GOAL_US:g} us", results[key] * 1e6, "<", GOAL_US, "us",
                  f"{results[key] * 1e6:.1f} us, {results[key] / base:.2f}x the baseline")
             for key, name in (("warm", "header seen before"), ("cold", "new header every message"))]  # printed above
    rows = [{"case": key, "label": CASES[key], "us": results[key] * 1e6, "ratio": results[key] / base} for key in CASES]
    figures = {"batch": batch, "batches": batches, "goal_us": GOAL_US, "rows": rows, "goals": goals,
               **{f"{k}_us": v * 1e6 for k, v in results.items()}}
    return save("small_message", BASELINE, figures, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
