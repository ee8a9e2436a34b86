"""Receiving is O(1) in tensor size: decoding a 64 MB tensor vs a 1 KB one (zero-copy).

Goal (issue 2): the 64 MB decode within 2x of the 1 KB decode. Messages of 4 KiB and more are
viewed in place; the 1 KB message is under dora's 4 KiB shared-memory threshold and is copied
(one 1 KB memmove), which is what a real receiver does with it too. `copy=True` is shown for
scale: it is O(size).
"""

from __future__ import annotations

import torch

import tensor_codec as tc

try:
    from _timing import fmt_us, per_call_seconds
except ImportError:
    from bench._timing import fmt_us, per_call_seconds

GOAL_RATIO = 2.0


def main() -> dict:
    small = torch.rand(256)  # 1 KB
    large = torch.rand(16 << 20)  # 64 MB
    messages = {"1KB": tc.encode(small), "64MB": tc.encode(large)}
    times = {}
    for name, (value, metadata) in messages.items():
        def decode_and_release(value=value, metadata=metadata):
            with tc.scope():
                return tc.decode(value, metadata)

        times[name] = per_call_seconds(decode_and_release, batch=500)
    value, metadata = messages["64MB"]
    copied = per_call_seconds(lambda: tc.decode(value, metadata, copy=True), batch=3, batches=5, warmup=1)
    ratio = times["64MB"] / times["1KB"]
    print("Decode scaling (decode + release in a scope; median of 15 batches of 500)")
    print(f"  1 KB tensor:  {fmt_us(times['1KB'])}")
    print(f"  64 MB tensor: {fmt_us(times['64MB'])}   {ratio:.2f}x the 1 KB decode   goal <= {GOAL_RATIO:.1f}x: {'met' if ratio <= GOAL_RATIO else 'NOT met'}")
    print(f"  (64 MB with copy=True, for scale: {fmt_us(copied)} = {copied / times['1KB']:.0f}x)")
    return {"1KB_us": times["1KB"] * 1e6, "64MB_us": times["64MB"] * 1e6, "ratio": ratio, "copy_64MB_us": copied * 1e6}


if __name__ == "__main__":
    main()
