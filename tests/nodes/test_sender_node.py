"""Tensor sender without a daemon: payloads, schedule, checksums, delivery with a fake clock."""

from __future__ import annotations

import sys

import pytest
import torch

import tensor_codec as tc
from tensor_codec.digest import content_digest
from tensor_codec.testing import make_suite
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.settings import SettingError
from tensor_codec_nodes.tensor_sender.config import load_config
from tensor_codec_nodes.tensor_sender.delivery import Delivery
from tensor_codec_nodes.tensor_sender.node import ack_input_closed, send, take_ack
from tensor_codec_nodes.tensor_sender.payloads import (
    Payload,
    corrupted_messages,
    make_payloads,
    move_keeping_layout,
    random_payloads,
    safetensors_payloads,
)
from tensor_codec_nodes.tensor_sender.sender import TensorSender
from tests.support.fakes import FakeNode

CPU = torch.device("cpu")


def handle_events(events: list[dict], sender: TensorSender, delivery: Delivery) -> bool:
    """What the sender node's hooks (on_input, on_input_closed, on_stop) do with a list of
    events: acks applied; -> True when the node stops (STOP, or an ack input closed)."""
    stop = False
    for event in events:
        if event["type"] == "INPUT":
            take_ack(event, sender, delivery)
        elif event["type"] == "STOP" or (
            event["type"] == "INPUT_CLOSED" and ack_input_closed(event.get("id"), delivery)
        ):
            stop = True
    return stop


def test_suite_payloads_cover_every_case_with_checksums_that_survive_the_codec():
    payloads = make_payloads(load_config({}), CPU)
    assert [p.case for p in payloads] == [f"suite/{name}" for name in make_suite()]
    sender = TensorSender(payloads, None)
    assert sender.total == len(payloads)
    for seq in range(sender.total):
        out = sender.message(seq)
        restored = tc.decode(*tc.encode(out.obj))
        assert content_digest(restored) == out.metadata[P.CHECKSUM], out.metadata[P.CASE]


def test_metadata_numbers_every_message():
    sender = TensorSender([Payload("a", torch.ones(2))], count=3, stream="abc", wants_ack=True)
    metadata = [sender.message(s).metadata for s in range(3)]
    assert [m[P.SEQ] for m in metadata] == [0, 1, 2]
    assert all(m[P.COUNT] == 3 and m[P.STREAM] == "abc" and m[P.WANTS_ACK] is True for m in metadata)
    assert P.WANTS_ACK not in TensorSender([Payload("a", torch.ones(2))], count=1).message(0).metadata


def test_count_cycles_payloads_and_zero_is_endless():
    payloads = [Payload("a", torch.zeros(1)), Payload("b", torch.ones(1))]
    sender = TensorSender(payloads, count=5)
    assert sender.total == 5
    assert [sender.message(s).metadata[P.CASE] for s in range(5)] == ["a", "b", "a", "b", "a"]
    assert TensorSender(payloads, count=0).total == 0


def test_corrupted_messages_are_spread_through_the_run_and_marked():
    payloads = [Payload(f"p{i}", torch.full((2,), float(i))) for i in range(12)]
    corrupted = corrupted_messages(0)
    sender = TensorSender(payloads, None, corrupted)
    assert sender.total == 12 + len(corrupted)
    kinds = [sender.message(s) for s in range(sender.total)]
    rejects = [s for s, m in enumerate(kinds) if m.raw is not None]
    assert len(rejects) == len(corrupted) and rejects[0] > 0 and rejects[-1] < sender.total - 1
    assert all(kinds[s].metadata[P.EXPECT] == "reject" for s in rejects)
    assert [m.metadata[P.CASE] for m in kinds if m.raw is None] == [p.case for p in payloads]
    for s in rejects:  # each really is refused by the codec
        with pytest.raises(tc.CodecError):
            tc.decode(kinds[s].raw, kinds[s].metadata)


def test_random_payloads_have_the_sizes_and_differ_per_message():
    (one_k, four_k) = random_payloads((1024, 4096), seed=1, device=CPU)
    assert one_k.obj.nbytes == 1024 and four_k.obj.dtype == torch.float32 and one_k.case == "random/1KB"
    first, digest_first = one_k.build(0)
    first = first.clone()
    second, digest_second = one_k.build(1)
    assert digest_first != digest_second and not torch.equal(first.view(torch.int32), second.view(torch.int32))
    assert digest_second == content_digest(second)


def test_safetensors_payloads_in_name_order(tmp_path):
    save_file = pytest.importorskip("safetensors.torch").save_file

    path = tmp_path / "m.safetensors"
    tensors = {"w": torch.randn(4, 3), "a_bias": torch.arange(5, dtype=torch.int16), "half": torch.randn(2, 2).half()}
    save_file(tensors, str(path))
    payloads = safetensors_payloads(str(path), CPU)
    assert [p.case for p in payloads] == ["file/a_bias", "file/half", "file/w"]
    for p in payloads:
        assert torch.equal(p.obj, tensors[p.case.removeprefix("file/")])


def test_bad_safetensors_files_are_setting_errors(tmp_path):
    with pytest.raises(
        SettingError, match="FILE: expected a .safetensors file, got '.*missing.safetensors' \\(not found\\)"
    ):
        safetensors_payloads(str(tmp_path / "missing.safetensors"), CPU)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\xff" * 64)
    with pytest.raises(SettingError, match="FILE: expected a valid .safetensors file"):
        safetensors_payloads(str(junk), CPU)


def test_unreliable_delivery_sends_each_once():
    d = Delivery(3, reliable=False)
    seqs = []
    while d.can_send_new():
        seqs.append(d.take_new(0.0))
    assert seqs == [0, 1, 2] and d.finished and d.retransmissions(100.0) == []


def test_reliable_delivery_windows_retransmits_and_gives_up():
    d = Delivery(5, reliable=True, window=2, retry_s=1.0, give_up_s=3.0)
    assert [d.take_new(0.0), d.take_new(0.0)] == [0, 1]
    assert not d.can_send_new()  # window full
    d.ack(0)
    assert d.can_send_new() and d.take_new(0.5) == 2
    assert d.retransmissions(0.9) == []
    assert d.retransmissions(1.0) == [1]  # unacked for retry_s
    assert d.retransmissions(1.6) == [2] and d.retransmits == 2
    d.ack(2)
    assert d.retransmissions(3.0) == [] and d.lost == [1]  # past give_up_s
    d.ack(99)  # unknown acks are ignored
    while d.can_send_new():
        d.ack(d.take_new(4.0))
    assert d.finished and d.next_seq == 5


def test_with_several_ackers_a_message_is_delivered_when_each_acknowledged_it():
    d = Delivery(2, reliable=True, window=1, retry_s=1.0, ackers=("ack", "ack_remote"))
    seq = d.take_new(0.0)
    d.ack(seq, "ack")
    assert not d.can_send_new() and d.retransmissions(1.0) == [0]  # the remote one still waits
    d.ack(seq, "ack")  # a duplicate from the same receiver changes nothing
    assert seq in d.unacked
    d.ack(seq, "ack_remote")
    assert seq not in d.unacked and d.can_send_new()
    d.ack(seq, "ack_remote")  # late duplicates after delivery are ignored
    seq = d.take_new(2.0)
    d.ack(seq, "ack_remote")
    d.ack(seq, "ack")
    assert d.finished


def test_acks_are_read_from_every_ack_input():
    sender = TensorSender([Payload("a", torch.ones(1))], count=2, stream="mine")
    d = Delivery(2, reliable=True, ackers=("ack", "ack_remote"))
    d.take_new(0.0)
    events = [
        {"type": "INPUT", "id": "ack", "metadata": {P.SEQ: 0, P.STREAM: "mine"}},
        {"type": "INPUT", "id": "ack_remote", "metadata": {P.SEQ: 0, P.STREAM: "mine"}},
    ]
    assert handle_events(events, sender, d) is False
    assert not d.unacked
    # Either receiver going away means nothing would ever be fully acknowledged: stop.
    assert handle_events([{"type": "INPUT_CLOSED", "id": "ack_remote"}], sender, d) is True


def test_a_message_that_cannot_be_sent_is_counted_lost():
    d = Delivery(2, reliable=True)
    d.forget(d.take_new(0.0))
    assert d.lost == [0] and not d.unacked


def test_acks_of_other_streams_are_ignored():
    sender = TensorSender([Payload("a", torch.ones(1))], count=3, stream="mine")
    d = Delivery(3, reliable=True)
    for _ in range(3):
        d.take_new(0.0)
    events = [
        {"type": "INPUT", "id": "ack", "metadata": {P.SEQ: 0, P.STREAM: "mine"}},
        {"type": "INPUT", "id": "ack", "metadata": {P.SEQ: 1, P.STREAM: "someone-else"}},
        {"type": "INPUT", "id": "ack", "metadata": {P.SEQ: "2", P.STREAM: "mine"}},
    ]
    assert handle_events(events, sender, d) is False
    assert set(d.unacked) == {1, 2}
    assert handle_events([{"type": "STOP"}], sender, d) is True


@pytest.mark.parametrize("count", [1, 2, 6, 57])
def test_corrupted_messages_fit_inside_any_count(count):
    corrupted = corrupted_messages(0)
    sender = TensorSender([Payload("p", torch.ones(1))], count, corrupted)
    kinds = ["C" if sender.message(s).raw is not None else "p" for s in range(sender.total)]
    assert kinds.count("p") == count and kinds.count("C") == len(corrupted)
    assert [sender.message(s).metadata[P.CASE] for s in range(sender.total) if kinds[s] == "C"] == [
        c[0] for c in corrupted
    ]


def test_moving_payloads_keeps_every_failure_mode_layout():
    from tensor_codec.testing import make_layout_cases

    for name, t in make_layout_cases().items():
        moved = move_keeping_layout(t, CPU)
        assert (moved.shape, moved.stride(), moved.storage_offset()) == (t.shape, t.stride(), t.storage_offset()), name
        assert (moved.is_conj(), moved.is_neg(), moved.requires_grad) == (t.is_conj(), t.is_neg(), t.requires_grad), (
            name
        )
        assert content_digest(moved) == content_digest(t), name
        if t.untyped_storage().nbytes():
            assert moved.untyped_storage().data_ptr() != t.untyped_storage().data_ptr(), name


def test_a_closed_ack_input_stops_a_reliable_sender_only():
    sender = TensorSender([Payload("a", torch.ones(1))], count=3)
    closed = [{"type": "INPUT_CLOSED", "id": "ack"}]
    assert handle_events(closed, sender, Delivery(3, reliable=True)) is True
    assert handle_events(closed, sender, Delivery(3, reliable=False)) is False


def test_a_message_that_fails_to_send_is_logged_and_counted(caplog):
    import logging

    sender = TensorSender([Payload("a", torch.ones(1))], count=2)
    delivery = Delivery(2, reliable=False)
    assert (
        send(FakeNode(fail="dora says no"), sender, delivery, delivery.take_new(0.0), logging.getLogger("test")) is True
    )
    assert delivery.lost == [0]
    assert "message 0 (a) not sent: RuntimeError: dora says no" in caplog.text


def test_sending_that_keeps_failing_stops_the_sender():
    import logging

    from tensor_codec_nodes.tensor_sender.node import MAX_FAILURES_IN_A_ROW

    sender = TensorSender([Payload("a", torch.ones(1))], count=0)
    delivery = Delivery(0, reliable=False)
    results = [
        send(FakeNode(fail="dora says no"), sender, delivery, delivery.take_new(0.0), logging.getLogger("test"))
        for _ in range(MAX_FAILURES_IN_A_ROW)
    ]
    assert results[:-1] == [True] * (MAX_FAILURES_IN_A_ROW - 1) and results[-1] is False


def test_count_must_be_ascii_digits():
    with pytest.raises(SettingError, match="COUNT: expected all"):
        load_config({"COUNT": "\u00b2"})


def test_cuda_ipc_without_a_gpu_device_is_a_setting_error(monkeypatch, caplog):
    from tensor_codec_nodes.tensor_sender import main as sender_main

    monkeypatch.setenv("TRANSPORT", "cuda-ipc")
    monkeypatch.setenv("DEVICE", "cpu")
    monkeypatch.setattr(sys, "argv", ["tc-tensor-sender"])  # not pytest's own arguments
    assert sender_main.main() == 2
    assert "TRANSPORT: cuda-ipc shares GPU memory, expected DEVICE on a GPU, got cpu" in caplog.text
