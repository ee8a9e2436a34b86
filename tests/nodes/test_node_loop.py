"""The node loop (nodes/common/loop.py) on a scripted dora node: what each event kind does, when
the loop ends, and how it waits."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from tensor_codec.dora import Link
from tensor_codec_nodes.common.loop import MAX_ERRORS_LOGGED, EventLoop, NodeLogic
from tests.support.fakes import FakeNode

INPUTS = ("a", "b")  # what the scripted node is wired to
TIMEOUT = {"type": "ERROR", "error": "Timeout event stream error: no event within 0.1 s"}


class Recording(NodeLogic):
    def __init__(self, finished_after=None, wait=None, one_at_a_time=False):
        super().__init__(None, None, logging.getLogger("loop-test"))
        self.seen = []
        self.finished_after = finished_after
        self.wait_s = wait
        self.one_at_a_time = one_at_a_time
        self.rounds = 0

    def wait(self):
        return self.wait_s

    def more_events(self):
        return not self.one_at_a_time or self.rounds == len(self.seen)

    def work(self):
        self.rounds = len(self.seen)

    def on_input(self, event):
        self.seen.append(("input", event["id"]))

    def on_input_closed(self, input_id):
        self.seen.append(("closed", input_id))

    def on_stop(self):
        self.seen.append(("stop",))

    def on_input_over(self):
        self.seen.append(("over",))

    def finished(self):
        return self.finished_after is not None and sum(1 for s in self.seen if s[0] == "input") >= self.finished_after


def data(input_id):
    return {"type": "INPUT", "id": input_id, "value": None, "metadata": {}}


def test_inputs_stop_and_errors_are_dispatched_and_the_loop_runs_until_the_stream_ends(caplog):
    node = FakeNode(
        [data("a"), {"type": "STOP"}, {"type": "ERROR", "error": "link down"}, data("b"), None], inputs=INPUTS
    )
    logic = Recording()
    with caplog.at_level(logging.ERROR, logger="loop-test"):
        EventLoop(Link.of(node), logic, logic.log).run()
    assert logic.seen == [("input", "a"), ("stop",), ("input", "b"), ("over",)]  # STOP does not end it
    assert "dora reported: link down" in caplog.text


def test_when_every_input_closed_what_was_queued_behind_is_still_dispatched_then_it_ends():
    node = FakeNode(
        [{"type": "INPUT_CLOSED", "id": "a"}, {"type": "INPUT_CLOSED", "id": "b"}, data("a"), data("b")], inputs=INPUTS
    )
    logic = Recording()
    EventLoop(Link.of(node), logic, logic.log).run()
    assert logic.seen == [("closed", "a"), ("closed", "b"), ("input", "a"), ("input", "b"), ("over",)]
    assert ("next", None) not in node.calls[2:]  # no blocking read after the last input closed


def test_a_finished_node_still_takes_what_is_queued_behind():
    """dora hands out INPUT_CLOSED before the inputs still queued: a node that is done (all its
    messages acknowledged, say) still gets the acks queued behind."""
    node = FakeNode([data("a"), data("a"), data("b"), data("b"), None], inputs=INPUTS)
    logic = Recording(finished_after=2, one_at_a_time=True)
    EventLoop(Link.of(node), logic, logic.log).run()
    assert logic.seen == [("input", "a"), ("input", "a"), ("input", "b"), ("input", "b")]
    assert node.calls.count(("next", None)) == 2  # one event a round until finished, then what was queued


def test_a_timeout_ends_the_reading_and_is_no_error(caplog):
    node = FakeNode([TIMEOUT, data("a"), None], inputs=INPUTS)
    logic = Recording(wait=0.5)
    with caplog.at_level(logging.ERROR, logger="loop-test"):
        EventLoop(Link.of(node), logic, logic.log).run()
    assert logic.seen == [("input", "a"), ("over",)] and not caplog.text
    assert node.calls[0] == ("next", 0.5)


def test_short_waits_nap_instead_of_waiting_in_dora():
    node = FakeNode([data("a")], inputs=INPUTS)
    logic = Recording(wait=0.001, finished_after=1)
    EventLoop(Link.of(node), logic, logic.log).run()
    assert all(call == ("try_recv", None) for call in node.calls)


def test_errors_are_counted_and_only_the_first_ones_logged(caplog):
    errors = [{"type": "ERROR", "error": f"e{i}"} for i in range(MAX_ERRORS_LOGGED + 5)]
    node = FakeNode([*errors, None], inputs=INPUTS)
    logic = Recording()
    loop = EventLoop(Link.of(node), logic, logic.log)
    with caplog.at_level(logging.ERROR, logger="loop-test"):
        loop.run()
    assert loop.errors == MAX_ERRORS_LOGGED + 5
    assert caplog.text.count("dora reported: e") == MAX_ERRORS_LOGGED
    assert f"dora reported {MAX_ERRORS_LOGGED + 5} errors in all" in caplog.text


def test_run_starts_the_logic_on_the_joined_nodes_link_and_lets_the_node_go_when_done(monkeypatch):
    """One Link from joining to the end: the logic starts on it, the loop reads its node, and once
    done `Link.of` no longer holds the node (a dora Node leaves the dataflow only when freed)."""
    from tensor_codec_nodes.common import startup
    from tensor_codec_nodes.common.loop import EXIT_OK, run

    node = FakeNode([data("a"), None], inputs=INPUTS)
    joined = Link.of(node)
    monkeypatch.setattr(startup, "join_dataflow", lambda spec, log: joined)
    made = []

    class Started(Recording):
        spec = SimpleNamespace(name="tc-loop-test")
        load_config = staticmethod(lambda env: SimpleNamespace())

        def __init__(self, config, device, log):
            super().__init__()
            made.append(self)

        def start(self, link):
            self.link = link

    assert run(Started) == EXIT_OK
    assert made[0].link is joined and made[0].seen == [("input", "a"), ("over",)]
    assert Link.of(node) is not joined  # closed: a later look makes a fresh one
