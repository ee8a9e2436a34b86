"""Test node: good messages with deliberately corrupted ones between them, *not* marked as
expected rejections, so the receiver must log each as bad, count it and keep going."""

import torch
from dora import Node

import tensor_codec as tc
from tensor_codec.digest import content_digest
from tensor_codec_nodes.common import protocol as P

node = Node()
good = torch.arange(1000, dtype=torch.float32).reshape(10, 100)
value, codec_md = tc.encode(good)
base = {P.COUNT: 6, P.STREAM: "corrupt-test", P.CHECKSUM: content_digest(good)}
messages = [
    (value, {**codec_md, **base}),  # good
    (value.slice(0, len(value) - 8), {**codec_md, **base, P.CASE: "truncated buffer"}),
    (value, {**codec_md, **base, "tc.header": "{not json", P.CASE: "broken header"}),
    (value, {**base, P.CASE: "no codec keys"}),
    (value, {**codec_md, **base, P.CHECKSUM: "crc32:00000000", P.CASE: "wrong checksum"}),
    (value, {**codec_md, **base}),  # good again: the receiver kept going
]
sent = 0
for event in node:
    if event["type"] == "INPUT" and sent < len(messages):
        data, metadata = messages[sent]
        node.send_output("tensors", data, {**metadata, P.SEQ: sent, P.SENT_NS: P.now_ns()})
        sent += 1
        if sent == len(messages):
            break
