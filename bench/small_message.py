"""Encode + decode of a small TVTensor (1 KB BoundingBoxes, 64 x 4 float32) in one process.

Goal (issue 2): under 50 microseconds. Printed against a baseline measured in the same run: the
bare bytes of the same tensor through the common `pa.array(t.numpy().ravel())` /
`torch.from_numpy(...).reshape(...)` pattern, which carries no dtype table, no attributes, no
validation. "cold" gives every message a header the receiver has not seen (a new canvas size each
time), "warm" repeats one header, as a stream of same-shaped messages does.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import torch
from torchvision import tv_tensors

import tensor_codec as tc

try:
    from _timing import fmt_us, per_call_seconds
except ImportError:  # run as a module
    from bench._timing import fmt_us, per_call_seconds

GOAL_US = 50.0


def main() -> dict:
    boxes = tv_tensors.BoundingBoxes(torch.rand(64, 4), format="XYXY", canvas_size=(480, 640))
    assert boxes.numel() * boxes.element_size() == 1024

    def warm():
        value, metadata = tc.encode(boxes)
        return tc.decode(value, metadata)

    plain = boxes.as_subclass(torch.Tensor)
    # Distinct canvas sizes, built beforehand, so every message brings a header not seen before.
    distinct = itertools.cycle([tv_tensors.wrap(plain, like=boxes, canvas_size=(h, 640)) for h in range(1, 60_001)])

    def cold():
        value, metadata = tc.encode(next(distinct))
        return tc.decode(value, metadata)

    def baseline():
        value = pa.array(plain.numpy().ravel())
        return torch.from_numpy(value.to_numpy(zero_copy_only=False).copy()).reshape(64, 4)

    def wrap_only():  # what rebuilding the TVTensor alone costs, for context
        return tv_tensors.wrap(plain, like=boxes, canvas_size=(480, 640))

    results = {
        "baseline": per_call_seconds(baseline, batch=2000),
        "warm": per_call_seconds(warm, batch=2000),
        "cold": per_call_seconds(cold, batch=2000),
        "wrap_only": per_call_seconds(wrap_only, batch=2000),
    }
    print("Small TVTensor: encode + decode of 1 KB BoundingBoxes (median of 15 batches of 2000)")
    print(f"  baseline pa.array + from_numpy, bare bytes: {fmt_us(results['baseline'])}")
    print(f"  tensor_codec, header seen before (stream):  {fmt_us(results['warm'])}   {results['warm'] / results['baseline']:.2f}x baseline   goal < {GOAL_US:.0f} us: {'met' if results['warm'] * 1e6 < GOAL_US else 'NOT met'}")
    print(f"  tensor_codec, new header every message:     {fmt_us(results['cold'])}   {results['cold'] / results['baseline']:.2f}x baseline   goal < {GOAL_US:.0f} us: {'met' if results['cold'] * 1e6 < GOAL_US else 'NOT met'}")
    print(f"  (tv_tensors.wrap alone, for scale:          {fmt_us(results['wrap_only'])})")
    return {k: v * 1e6 for k, v in results.items()}


if __name__ == "__main__":
    main()
