"""bench/_latency_node.py's sender without a dataflow: the contenders that force one of dora's
primitives set it on tc's Output for their own messages, never on the codec's modules."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

import tensor_codec as tc
from tensor_codec.dora import Link
from tensor_codec.dora import output as dora_output
from tests.support.bench import load_module
from tests.support.fakes import FakeNode


def received(sent) -> torch.Tensor:
    _, raw, metadata = sent
    return tc.receive(
        {"type": "INPUT", "id": "in", "value": pa.array(np.frombuffer(raw, np.uint8)), "metadata": metadata}
    )


@pytest.mark.parametrize("contender, raw", [("tc:send_output", False), ("tc:send_output_raw", True), ("tc", False)])
def test_a_forced_contender_sets_the_outputs_primitive_for_its_messages_alone(monkeypatch, contender, raw):
    sender = load_module("_latency_node", monkeypatch)
    node = FakeNode()
    tensor = torch.randn(64, 1024)  # 256 KiB: below DORA_COPIES_BELOW, so dora copies it unless forced
    taken = []
    real_raw = FakeNode.send_output_raw
    monkeypatch.setattr(node, "send_output_raw", lambda *a, **k: taken.append(a) or real_raw(node, *a, **k))
    for _ in range(2):  # the first message, then its signature's prepared one
        sender._send(node, contender, tensor, {"contender": contender})
    assert len(taken) == (2 if raw else 0) and len(node.sent) == 2
    assert Link.of(node).output("out").copies_below == dora_output.DORA_COPIES_BELOW == 32 << 20  # as they were
    assert torch.equal(received(node.sent[1]), tensor)
