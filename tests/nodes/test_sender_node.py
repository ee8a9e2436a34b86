"""Tensor sender without a daemon: payloads, schedule, checksums, delivery with a fake clock."""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import pytest
import torch

import tensor_codec as tc
from tensor_codec.digest import content_digest
from tensor_codec.dora import Link
from tensor_codec.testing import make_suite
from tensor_codec_nodes.common import protocol as P
from tensor_codec_nodes.common.loop import EXIT_FAILED, EXIT_OK
from tensor_codec_nodes.common.settings import SettingError
from tensor_codec_nodes.tensor_sender import node as sender_node_module
from tensor_codec_nodes.tensor_sender.config import load_config
from tensor_codec_nodes.tensor_sender.node import TensorSenderNode, transmit
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


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def sender_node(monkeypatch, env=None, inputs=("ack",), node=None):
    """A started TensorSenderNode on a FakeNode (outputs `tensors`, `inputs` declared), its time
    a fake clock: -> (the node logic, the fake node, the clock)."""
    clock = Clock()
    monkeypatch.setattr(sender_node_module, "time", SimpleNamespace(monotonic=clock))
    config = load_config({"MODE": "random", "SIZES": "1KB", "DEVICE": "cpu", **(env or {})})
    logic = TensorSenderNode(config, CPU, logging.getLogger("sender-test"))
    node = node or FakeNode(node_id="sender", inputs=inputs, outputs=["tensors"])
    logic.start(Link.of(node))
    return logic, node, clock


def ack_of(metadata, acker="ack", **changes):
    return {"type": "INPUT", "id": acker, "metadata": {P.SEQ: metadata[P.SEQ], P.STREAM: metadata[P.STREAM], **changes}}


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


def test_without_acks_each_message_is_sent_once_and_the_run_ends(monkeypatch):
    logic, node, clock = sender_node(monkeypatch, {"COUNT": "3"}, inputs=())
    assert logic.more_events()  # sending as fast as it can, it still reads every round (STOP)
    while not logic.finished():
        logic.work()
        clock.now += 0.01
        assert clock.now < 1.0
    assert [m[P.SEQ] for _, _, m in node.sent] == [0, 1, 2] and P.WANTS_ACK not in node.sent[0][2]
    assert logic.finish() == EXIT_OK


def test_with_acks_the_window_bounds_what_is_unacknowledged_and_resends_what_is_due(monkeypatch):
    logic, node, clock = sender_node(monkeypatch, {"COUNT": "5", "WINDOW": "2", "RETRY_S": "1", "ACK_TIMEOUT_S": "3"})
    logic.work()
    assert [m[P.SEQ] for _, _, m in node.sent] == [0, 1] and logic.more_events()  # window full: read acks
    logic.on_input({"type": "INPUT", "id": "ack", "metadata": {P.SEQ: 7, P.STREAM: "junk"}})
    assert logic.more_events()  # junk opens nothing: read on
    logic.on_input(ack_of(node.sent[0][2], tx=node.sent[0][2][P.TX]))
    assert not logic.more_events()  # room: the round's reading ends, the next message goes first
    logic.work()
    clock.now = 1.0
    logic.work()  # message 1 unacknowledged for RETRY_S: resent, with a tx of its own
    sent = [(m[P.SEQ], m[P.TX]) for _, _, m in node.sent]
    assert sent == [(0, 1), (1, 2), (2, 3), (1, 4), (2, 5)] and logic.outbox.window.retransmits == 2


def test_with_several_ackers_a_message_is_delivered_when_each_acknowledged_it(monkeypatch):
    logic, node, _ = sender_node(monkeypatch, {"COUNT": "1"}, inputs=("ack", "ack_remote"))
    logic.work()
    first = node.sent[0][2]
    logic.on_input(ack_of(first, "ack"))
    logic.on_input(ack_of(first, "ack"))  # a duplicate from the same receiver changes nothing
    assert logic.outbox.outstanding == 1 and not logic.finished()
    logic.on_input(ack_of(first, "ack_remote"))
    assert logic.outbox.outstanding == 0 and logic.finished() and logic.finish() == EXIT_OK


def test_acks_of_other_streams_and_malformed_ones_change_nothing(monkeypatch):
    logic, node, _ = sender_node(monkeypatch, {"COUNT": "3"})
    logic.work()
    first = node.sent[0][2]
    logic.on_input({"type": "INPUT", "id": "ack", "metadata": {P.SEQ: 1, P.STREAM: "someone-else"}})
    logic.on_input({"type": "INPUT", "id": "ack", "metadata": {P.SEQ: "2", P.STREAM: first[P.STREAM]}})
    assert logic.outbox.outstanding == 3 and logic.outbox.window.stray_acks == 1 and logic.refusals.total == 1
    logic.on_input(ack_of(first))
    assert logic.outbox.outstanding == 2


def test_a_closed_ack_input_stops_a_reliable_sender_only(monkeypatch):
    logic, _, _ = sender_node(monkeypatch, {"COUNT": "3"})
    logic.on_input_closed("ack")  # that receiver is gone: nothing would ever be fully acknowledged
    assert logic.finished()
    plain, _, _ = sender_node(monkeypatch, {"COUNT": "3"}, inputs=("tick",))
    plain.on_input_closed("ack")
    assert not plain.finished()


def drive(logic, node, clock, consumer, *, until_s=300.0, step_s=0.01):
    """Run the sender's rounds on the fake clock, its consumer answering each new copy with
    `consumer(metadata, how many distinct messages it took)` (an ack event, or None), until the
    node is finished. -> when each copy was sent, and when the node finished (None: it did not)."""
    sent_at: list[float] = []
    taken: set = set()
    read = 0
    while clock.now < until_s:
        logic.work()
        for _, _, metadata in node.sent[read:]:
            sent_at.append(clock.now)
            taken.add(metadata[P.SEQ])
            answer = consumer(metadata, len(taken))
            if answer is not None:
                logic.on_input(answer)
        read = len(node.sent)
        if logic.finished():
            return sent_at, clock.now
        clock.now = round(clock.now + step_s, 6)
    return sent_at, None


LIVE = {"COUNT": "40", "RETRY_S": "0.25", "ACK_TIMEOUT_S": "6"}


def echoing_another_messages_tx():
    """A consumer that acknowledges every copy with the tx of the message before's first copy."""
    first_tx: dict[int, int] = {}

    def consumer(metadata, _taken):
        first_tx.setdefault(metadata[P.SEQ], metadata[P.TX])
        return ack_of(metadata, tx=first_tx.get(metadata[P.SEQ] - 1, 0))

    return consumer


@pytest.mark.parametrize(
    "consumer, acknowledged",
    [
        (lambda m, taken: ack_of(m, tx=m[P.TX]) if taken <= 24 else None, 24),  # alive, then says nothing
        (lambda m, taken: ack_of(m, tx=0), 0),  # acknowledges every copy, echoing a stale tx
        (echoing_another_messages_tx(), 0),
    ],
    ids=["stops acknowledging after 24", "echoes tx 0", "echoes a tx of another message"],
)
def test_the_sender_never_wedges_it_transmits_or_ends_naming_what_was_not_acknowledged(
    monkeypatch, caplog, capsys, consumer, acknowledged
):
    """It sent 24 of 40 (10 of 40 with tx 0 echoed), then nothing: it never probed with a new
    message, and gave up nothing it had not sent; it neither ended nor logged until dora stopped
    the dataflow. Now: never silent for longer than ACK_TIMEOUT_S plus one probe period, and an
    end with status 1 naming how many were not acknowledged."""
    logic, node, clock = sender_node(monkeypatch, LIVE)
    sent_at, ended = drive(logic, node, clock, consumer)
    window = logic.outbox.window
    assert ended is not None, f"wedged: {len(node.sent)} copies sent, {window.delivered} acknowledged by 300 s"
    times = [0.0, *sent_at, ended]
    assert max(b - a for a, b in zip(times, times[1:])) <= window.give_up_s + window.probe_max_s
    assert logic.next_seq == 40 and window.delivered == acknowledged
    with caplog.at_level(logging.ERROR):
        assert logic.finish() == EXIT_FAILED
    assert f"{40 - acknowledged} of 40 messages not acknowledged" in caplog.text
    assert f"{acknowledged} acknowledged, {40 - acknowledged} not acknowledged" in capsys.readouterr().out


def test_a_sender_whose_consumer_acknowledges_everything_ends_at_once(monkeypatch, capsys):
    logic, node, clock = sender_node(monkeypatch, LIVE)
    sent_at, ended = drive(logic, node, clock, lambda m, taken: ack_of(m, tx=m[P.TX]))
    assert ended is not None and ended < 1.0 and len(sent_at) == 40
    assert logic.finish() == EXIT_OK
    assert "40 messages sent, 40 acknowledged, 0 not acknowledged, 0 retransmitted" in capsys.readouterr().out


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


def test_a_message_that_fails_to_send_is_logged_and_counted(monkeypatch, caplog):
    node = FakeNode(node_id="sender", outputs=["tensors"], fail="dora says no", fail_times=1)
    logic, _, _ = sender_node(monkeypatch, {"COUNT": "2"}, inputs=(), node=node)
    with caplog.at_level(logging.ERROR):
        logic.work()
    assert "message 0 (random/1KB) not sent: RuntimeError: dora says no" in caplog.text
    assert logic.outbox.failed == 1 and logic.outbox.sent == 1 and [m[P.SEQ] for _, _, m in node.sent] == [1]


def test_sending_that_keeps_failing_stops_the_sender():
    from tensor_codec_nodes.tensor_sender.node import MAX_FAILURES_IN_A_ROW

    sender = TensorSender([Payload("a", torch.ones(1))], count=0)
    node = FakeNode(fail="dora says no")
    for _ in range(MAX_FAILURES_IN_A_ROW):
        with pytest.raises(RuntimeError):
            transmit(Link.of(node), sender, 0, {})
    assert sender.failures_in_a_row == MAX_FAILURES_IN_A_ROW
    transmit(Link.of(FakeNode(outputs=["tensors"])), sender, 1, {P.TX: 7})
    assert sender.failures_in_a_row == 0


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


def test_a_count_no_receiver_would_accept_is_a_setting_error():
    """A receiver refuses a count past 2**32 as a bad message (protocol.MAX_COUNT): a sender set to
    send more would have every message refused."""
    assert load_config({"COUNT": str(P.MAX_COUNT)}).count == P.MAX_COUNT
    with pytest.raises(SettingError, match="COUNT: expected all, 0 .endless. or a number of messages up to 2"):
        load_config({"COUNT": str(P.MAX_COUNT + 1)})
