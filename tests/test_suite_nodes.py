"""The demo pipeline's node logic without dora: config, flow control with retransmission
(dora 1.1 can drop messages), and the receiver's verdicts. The loop runs in test_dora_e2e.py."""

from __future__ import annotations

import sys

import pytest
import torch

import tensor_codec as tc
from conftest import NODES

sys.path.insert(0, str(NODES))
from suite_receiver import Verifier  # noqa: E402
from suite_sender import Config, SuiteSender, corrupted_messages, load_config  # noqa: E402


@pytest.mark.parametrize(
    "env, fragment",
    [({"ROUNDS": "0"}, "ROUNDS: expected an integer >= 1, got 0"), ({"BIG_MB": "lots"}, "BIG_MB: expected an integer >= 0, got 'lots'"), ({"CORRUPT": "yes"}, "CORRUPT: expected 0 or 1, got 'yes'")],
)
def test_bad_settings_name_the_setting_the_value_and_what_is_allowed(env, fragment):
    with pytest.raises(ValueError, match=fragment):
        load_config(env)


def test_defaults():
    assert load_config({}) == Config(rounds=1, seed=0, big_mb=24, corrupt=True)


def sender(window=3, retry_s=1.0):
    return SuiteSender(Config(rounds=1, big_mb=0, corrupt=True), window=window, retry_s=retry_s)


def test_at_most_a_window_is_in_flight_and_each_ack_frees_one_slot():
    s = sender(window=3)
    assert s.due(now=0.0) == [0, 1, 2]
    assert s.due(now=0.1) == []  # window full, nothing old enough to resend
    s.ack(1)
    assert s.due(now=0.2) == [3]


def test_an_unacked_message_is_resent_after_the_retry_time():
    s = sender(window=2, retry_s=1.0)
    s.due(now=0.0)
    s.ack(0)
    assert s.due(now=0.5) == [2]
    assert s.due(now=1.2) == [1]  # seq 1 was lost: resent once its second passed
    assert s.retransmits == 1


def test_delivery_ends_only_when_everything_and_done_are_acked():
    s = sender(window=100)
    for seq in s.due(now=0.0):
        s.ack(seq)
    assert s.all_sent_and_acked and not s.done_acked
    s.ack(SuiteSender.DONE_SEQ)
    assert s.done_acked


def as_event(value, metadata, **extra):
    return {"type": "INPUT", "id": "tensors", "value": value, "metadata": {**metadata, **extra}}


def test_the_receiver_counts_good_duplicate_out_of_order_and_missing():
    v = Verifier()
    stacked = v.suite["layout/stacked"]
    value, metadata = tc.encode(stacked)
    assert v.handle(as_event(value, metadata, case="layout/stacked", seq=1)) == "good"
    assert v.handle(as_event(value, metadata, case="layout/stacked", seq=0)) == "good"  # late
    assert v.handle(as_event(value, metadata, case="layout/stacked", seq=1)) == "duplicate"
    report = v.finish(expected_total=3)
    assert (report.good, report.out_of_order, report.duplicates, report.missing) == (2, 1, 1, 1)
    assert not report.ok


def test_wrong_content_is_bad_and_a_corrupted_message_must_be_rejected():
    v = Verifier()
    value, metadata = tc.encode(torch.zeros(2, 2, 3))
    assert v.handle(as_event(value, metadata, case="layout/stacked", seq=0)) == "bad"
    for seq, (case, bad_value, bad_metadata) in enumerate(corrupted_messages(0), start=1):
        assert v.handle(as_event(bad_value, bad_metadata, case=case, seq=seq, expect="reject")) == "rejected"
    good_value, good_metadata = tc.encode(v.suite["layout/stacked"])
    assert v.handle(as_event(good_value, good_metadata, case="corrupt/x", seq=99, expect="reject")) == "bad"
    assert v.report.bad == 2 and v.report.rejected == 5
    assert "layout/stacked" in v.report.failures[0]
