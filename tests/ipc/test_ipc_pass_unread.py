"""`CudaIpcTransport.pass_unread`: a process that only looks at a CUDA IPC message's header (the
monitor) takes part as one of its receivers by claiming and releasing its ledger slot at once,
without opening anything (the CPU stand-in counts every device operation)."""

from __future__ import annotations

import pytest
import torch

import tensor_codec as tc
from tensor_codec.cuda_ipc import transport as cuda_ipc
from tensor_codec.transports import ENCODE_OUTPUT, get_transport
from tests.support.wire import with_transport

DEVICE_OPS = {"open_segment", "open_event", "wait", "message_view", "new_marker", "record_marker"}


def in_flight() -> int:
    state = cuda_ipc._get_state()
    state.producer.collect()
    return state.producer.output(ENCODE_OUTPUT).live_bytes


def test_a_message_passed_over_is_given_back_at_once_and_nothing_is_opened(fake):
    _, metadata = tc.encode(torch.arange(1000, dtype=torch.float32), transport="cuda-ipc")
    assert in_flight() == 4000
    get_transport("cuda-ipc").pass_unread(metadata)
    assert in_flight() == 0 and tc.ipc_flush(timeout_s=0)
    assert DEVICE_OPS.isdisjoint(fake.ops) and not fake.opened
    stats = tc.ipc_stats()["receiver"]
    assert stats["passed_unread"] == 1 and stats["claimed"] == 0 and stats["pending_release"] == 0


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: {**m, "tc.ipc.slot": "0"}, r"^tc.ipc.slot: expected an integer 0..65535, got '0'"),
        (lambda m: {**m, "tc.ipc.size": m["tc.ipc.size"] + 1}, r"^tc.ipc.size: expected 256 bytes"),
        (lambda m: {k: v for k, v in m.items() if k != "tc.ipc.event"}, r"^tc.ipc.event: expected base64"),
        (lambda m: {**m, "tc.ipc.generation": m["tc.ipc.generation"] + 1}, r"^tc.ipc.slot: message expired"),
        (lambda m: tc.encode(torch.zeros(64))[1], r"^tc.header.transport: expected 'cuda-ipc', got 'host'"),
        # Relabelled, a CUDA IPC header is a host header with a key host headers lack.
        (lambda m: with_transport(m, "host"), r"^tc.header: expected only keys .* unexpected \['producer'\]"),
    ],
)
def test_what_cannot_be_passed_over_is_a_decode_error_naming_the_field(fake, change, message):
    _, metadata = tc.encode(torch.zeros(64), transport="cuda-ipc")
    with pytest.raises(tc.DecodeError, match=message):
        get_transport("cuda-ipc").pass_unread(change(metadata))
    assert in_flight() == 256  # still the producer's: nothing claimed it


def test_a_producer_that_exited_is_named(fake, monkeypatch):
    _, metadata = tc.encode(torch.zeros(64), transport="cuda-ipc")
    monkeypatch.setattr("tensor_codec.cuda_ipc.receiving.pid_alive", lambda pid: False)
    with pytest.raises(tc.DecodeError, match=r"^tc.header.producer.pid: the producer \(process \d+\) has exited"):
        get_transport("cuda-ipc").pass_unread(metadata)
