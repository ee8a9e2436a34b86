"""Test node: send tensors whose metadata holds text UTF-8 cannot carry (a lone surrogate), on
the full path by dora's `send_output` and by `send_output_raw` (two tensors), and on a stream's
repeat; record in RESULT what tc.send raised each time, and whether the good message between
them went through (the receiver records what arrived)."""

import json
import os

import torch
from dora import Node

import tensor_codec as tc

node = Node()
frame = torch.zeros(4096)  # 16 KiB: its second message is a repeat
attempts = [
    ("first", frame, {"label": "\ud800"}),
    ("raw", {"a": frame, "b": torch.ones(3)}, {"label": "x\udc00"}),  # written into send_output_raw's buffer
    ("good", frame, {"label": "fine"}),
    ("repeat", frame, {"names": ["a", "b\udfff"]}),
]
result = {}
for event in node:
    if event["type"] != "INPUT":
        continue
    for name, obj, metadata in attempts:
        try:
            tc.send(node, "out", obj, metadata)
            result[name] = "sent"
        except Exception as e:  # anything else than the codec's error is recorded as a failure
            result[name] = f"{type(e).__name__}: {e}"
    break
with open(os.environ["RESULT"], "w") as f:
    json.dump(result, f)
