"""Test node: try to send a message bigger than any route of this node can carry; record what
tc.send raised (or that it went through) in RESULT."""

import json
import os

import torch
from dora import Node

import tensor_codec as tc

node = Node()
result = {"raised": None, "message": ""}
for event in node:
    if event["type"] != "INPUT":
        continue
    try:
        tc.send(node, "out", torch.zeros(int(os.environ["MEGABYTES"]) << 20, dtype=torch.uint8))
        result["raised"] = False
    except tc.CodecError as e:
        result = {"raised": type(e).__name__, "message": str(e)}
    break
with open(os.environ["RESULT"], "w") as f:
    json.dump(result, f)
