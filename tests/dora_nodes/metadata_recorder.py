"""Test node: record the caller's keys and `label` of every input message (the codec's keys
left out) in RESULT as a JSON list, once its inputs close."""

import json
import os

from dora import Node

received = []
for event in Node():
    if event["type"] == "INPUT":
        metadata = event["metadata"]
        keys = sorted(k for k in metadata if not k.startswith("tc.") and k != "timestamp")
        received.append({"keys": keys, "label": metadata.get("label")})
with open(os.environ["RESULT"], "w") as f:
    json.dump(received, f)
