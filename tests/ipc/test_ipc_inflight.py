"""The cap on bytes in flight per output, with a fake clock and a fake ledger."""

from __future__ import annotations

import pytest

import tensor_codec as tc
from tensor_codec.cuda_ipc.inflight import InFlightLimit
from tensor_codec.errors import InFlightLimitError


class FakeOutput:
    """Messages in flight, finished by the receivers after `finish_after` collects."""

    def __init__(self, live=(), finish_after=None):
        self.live = list(live)
        self.collects = 0
        self.finish_after = finish_after

    def live_bytes(self):
        return sum(self.live)

    def collect(self):
        self.collects += 1
        if self.finish_after is not None and self.collects >= self.finish_after and self.live:
            self.live.pop(0)


def limit(**kwargs):
    now = [0.0]

    def sleep(s):
        now[0] += s

    return InFlightLimit(100, clock=lambda: now[0], sleep=sleep, name="out", **kwargs), now


def test_room_means_send_without_a_look_at_the_ledger():
    """Room by the count of bytes not yet collected: admitted with no collect (issue 62: no
    ledger scan per send)."""
    cap, _ = limit()
    out = FakeOutput([30, 30])
    assert cap.admit(40, out.live_bytes, out.collect) is True and out.collects == 0


def test_past_the_cap_finished_messages_are_collected_first():
    """Over the cap by the count, a collect that frees enough admits at once: no wait, no drop."""
    cap, _ = limit(on_full="drop")
    out = FakeOutput([60, 30], finish_after=1)
    assert cap.admit(40, out.live_bytes, out.collect) is True
    assert out.collects == 1 and out.live == [30] and cap.waits == 0 and cap.dropped == 0


def test_wait_until_receivers_release():
    cap, now = limit(timeout_s=5)
    out = FakeOutput([60, 30], finish_after=4)
    assert cap.admit(40, out.live_bytes, out.collect) is True
    assert out.live == [30] and cap.waits == 1 and 0 < cap.waited_s < 5


def test_wait_times_out_with_a_clear_error():
    cap, now = limit(timeout_s=2)
    out = FakeOutput([90])
    with pytest.raises(
        InFlightLimitError, match=r"out: 90 bytes still in flight after waiting 2\.\d+ s, cap 100 bytes"
    ):
        cap.admit(20, out.live_bytes, out.collect)
    assert now[0] >= 2
    assert issubclass(InFlightLimitError, tc.CodecError) and issubclass(InFlightLimitError, TimeoutError)


def test_drop_policy_counts_and_returns_false(caplog):
    cap, _ = limit(on_full="drop")
    out = FakeOutput([90])
    assert [cap.admit(20, out.live_bytes, out.collect) for _ in range(3)] == [False] * 3
    assert cap.dropped == 3 and caplog.text.count("dropping messages") == 1  # one log line per burst
    out.live.clear()
    assert cap.admit(20, out.live_bytes, out.collect) is True


def test_a_message_bigger_than_the_cap_is_refused_at_once():
    for policy in ("wait", "drop"):
        cap, now = limit(on_full=policy)
        with pytest.raises(InFlightLimitError, match="a message of 101 bytes can never fit the cap of 100 bytes"):
            cap.admit(101, lambda: 0, lambda: None)
        assert now[0] == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_bytes": 0}, "max_bytes_in_flight: expected a positive number of bytes, got 0"),
        ({"max_bytes": 10, "on_full": "block"}, "on_full: expected one of wait, drop, got 'block'"),
        ({"max_bytes": 10, "timeout_s": -1}, "timeout_s: expected >= 0 seconds, got -1"),
    ],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        InFlightLimit(**kwargs)
