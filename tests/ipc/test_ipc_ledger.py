"""The CUDA IPC release ledger, on any machine: real processes claim and release slots."""

from __future__ import annotations

import multiprocessing as mp
import os
import struct
import time

import pytest

from tensor_codec.cuda_ipc import ledger as ledger_module
from tensor_codec.cuda_ipc import ledger_file
from tensor_codec.cuda_ipc.ledger import HOLDERS, SWEEP_NS, Ledger, LedgerError, LedgerView, SlotRef
from tests.support.load import cpu_hog

SECOND = 1_000_000_000


@pytest.fixture
def ledger():
    led = Ledger(slots=8, claim_timeout_s=5.0)
    yield led
    led.close()


def test_a_slot_is_finished_when_every_expected_receiver_released(ledger):
    ref = ledger.publish(expected=2, nbytes=100, token="memory", per_process=2)  # both receivers in this process
    a, b = LedgerView(ref.ledger), LedgerView(ref.ledger)
    a.claim(ref)
    b.claim(ref)
    assert ledger.collect() == []
    a.release(ref)
    assert ledger.collect() == []
    b.release(ref)
    (finished,) = ledger.collect()
    assert finished.token == "memory"


def test_unclaimed_messages_finish_after_the_claim_timeout(ledger):
    ref = ledger.publish(expected=1, nbytes=10, token="t")
    now = time.monotonic_ns()
    assert ledger.collect(now_ns=now) == []
    (finished,) = ledger.collect(now_ns=now + 6 * SECOND)  # dora dropped it on the way
    assert finished.token == "t"
    with pytest.raises(LedgerError, match="message expired: its producer reclaimed the memory"):
        LedgerView(ref.ledger).claim(ref)


def test_a_claim_holds_the_slot_past_the_timeout(ledger):
    ref = ledger.publish(expected=1, nbytes=10, token="t")
    view = LedgerView(ref.ledger)
    view.claim(ref)
    assert ledger.collect(now_ns=time.monotonic_ns() + 60 * SECOND) == []
    view.release(ref)
    assert len(ledger.collect()) == 1


def test_generations_make_stale_references_fail(ledger):
    first = ledger.publish(expected=0, nbytes=1, token=1)
    assert len(ledger.collect()) == 1  # nobody expected: finished at once
    for _ in range(8):  # go round the ring to reuse the slot
        ledger.publish(expected=0, nbytes=1, token=2)
        ledger.collect()
    with pytest.raises(LedgerError, match="message expired"):
        LedgerView(first.ledger).claim(first)


def test_a_full_ledger_is_an_error(ledger):
    for _ in range(8):
        ledger.publish(expected=1, nbytes=1, token=None)
    with pytest.raises(LedgerError, match="all 8 slots hold messages still in use"):
        ledger.publish(expected=1, nbytes=1, token=None)


def test_hostile_references_are_refused(ledger):
    view = LedgerView(ledger.name)
    with pytest.raises(LedgerError, match="ledger slot: expected 0..7, got 8"):
        view.claim(SlotRef(ledger.name, 8, 1))
    with pytest.raises(LedgerError, match="ledger slot: expected 0..7, got -1"):
        view.claim(SlotRef(ledger.name, -1, 1))
    with pytest.raises(LedgerError, match="expected a name like 'tc-...'"):
        LedgerView("../etc/passwd")
    with pytest.raises(LedgerError, match="does not exist"):
        LedgerView("tc-no-such-ledger")


def test_a_ledger_of_another_version_is_refused_naming_both(ledger):
    """A producer of tensor_codec's ledger format 02 (80-byte holders with a release event each)."""
    with open(ledger.file.path, "r+b") as f:
        f.write(b"tcledg02" + struct.pack("<II", 8, 32 + HOLDERS * 80))
    with pytest.raises(
        LedgerError, match=r"of this version: expected b'tcledg04' with 288-byte slots, got b'tcledg02' with 1312"
    ):
        LedgerView(ledger.name)


def test_a_truncated_ledger_is_refused(ledger):
    os.truncate(ledger.file.path, 64 + 7 * 288)
    with pytest.raises(LedgerError, match=r"is 2080 bytes, expected 2368 for 8 slots"):
        LedgerView(ledger.name)


def test_too_many_receivers_of_one_message(ledger):
    ref = ledger.publish(expected=HOLDERS, nbytes=1, token=None, per_process=HOLDERS)
    view = LedgerView(ref.ledger)
    for _ in range(HOLDERS):
        view.claim(ref)
    with pytest.raises(LedgerError, match=f"more than {HOLDERS} receivers"):
        view.claim(ref)


def _claim_and_maybe_release(name, slot, generation, release):
    view = LedgerView(name)
    ref = SlotRef(name, slot, generation)
    view.claim(ref)
    if release:
        view.release(ref)
    os._exit(0)  # no cleanup at all, like a crash


def test_receivers_in_other_processes_and_a_receiver_that_dies_holding(ledger):
    ctx = mp.get_context("fork")
    ref = ledger.publish(expected=3, nbytes=5, token="frames")
    procs = [
        ctx.Process(target=_claim_and_maybe_release, args=(ref.ledger, ref.slot, ref.generation, i < 2))
        for i in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    # Two released; the third died holding its claim: its process is gone, so the slot is done.
    (finished,) = ledger.collect()
    assert finished.token == "frames"


def _claim_many(name, slot, generation, count):
    view = LedgerView(name)
    for _ in range(count):
        view.claim(SlotRef(name, slot, generation))
    os._exit(0)


def test_claims_from_many_processes_at_once_are_all_counted():
    ledger = Ledger(slots=1)
    try:
        ref = ledger.publish(expected=HOLDERS, nbytes=1, token=None, per_process=4)
        ctx = mp.get_context("fork")
        procs = [ctx.Process(target=_claim_many, args=(ref.ledger, ref.slot, ref.generation, 4)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(10)
        import struct

        from tensor_codec.cuda_ipc.ledger_file import HEADER_BYTES

        claims = struct.unpack_from("<H", ledger.file.map, HEADER_BYTES + 14)[0]
        assert claims == HOLDERS
    finally:
        ledger.close()


def test_close_removes_the_file():
    ledger = Ledger(slots=2)
    path = ledger.file.path
    assert os.path.exists(path)
    ledger.close()
    assert not os.path.exists(path)


# ------------------------------------------------- lost on the way, or still queued: by order, not by age
# The GPU host's slow-receiver run lost 1 of 40 messages under load: the producer took back a
# message its receiver had not claimed within the claim timeout, though it was only waiting.


class FakeClock:
    """CLOCK_MONOTONIC as the ledger and its receivers read it (claims are stamped with it)."""

    def __init__(self, monkeypatch):
        self.ns = time.monotonic_ns()
        fake = type("fake_time", (), {"monotonic_ns": staticmethod(lambda: self.ns)})
        monkeypatch.setattr(ledger_module, "time", fake)

    def advance(self, seconds: float) -> int:
        self.ns += int(seconds * SECOND)
        return self.ns


def take(view: LedgerView, ref: SlotRef) -> None:
    view.claim(ref)
    view.release(ref)


def test_a_receiver_behind_a_backlog_keeps_every_message_however_long_it_waits(ledger, monkeypatch):
    """Ten messages published at once; the receiver takes one a second (claim timeout 5 s), and
    the producer collects all the while: the last ones wait 9 s, and none is taken back."""
    clock = FakeClock(monkeypatch)
    refs = [ledger.publish(expected=1, nbytes=10, token=i, output="frames") for i in range(8)]
    view = LedgerView(ledger.name)
    for ref in refs:
        take(view, ref)  # raises "message expired" if the producer took it back
        (finished,) = ledger.collect(now_ns=clock.ns)
        assert finished.token == refs.index(ref)
        clock.advance(1.0)


def test_a_message_its_receiver_passed_was_dropped_and_is_taken_back_at_once(ledger, monkeypatch):
    """dora delivers an input's messages in order: a receiver that claimed message 2 lost 1."""
    clock = FakeClock(monkeypatch)
    first, dropped, third = (ledger.publish(expected=1, nbytes=10, token=i, output="frames") for i in range(3))
    view = LedgerView(ledger.name)
    take(view, first)
    assert [(f.token, f.unclaimed) for f in ledger.collect(now_ns=clock.ns)] == [(0, 0)]
    assert ledger.collect(now_ns=clock.advance(1.0)) == []  # still on its way, perhaps
    take(view, third)
    # Well within the timeout; the dropped one says it lacks its one claim (counted as lost).
    assert sorted((f.token, f.unclaimed) for f in ledger.collect(now_ns=clock.ns)) == [(1, 1), (2, 0)]


def test_passing_is_counted_per_output(ledger, monkeypatch):
    clock = FakeClock(monkeypatch)
    view = LedgerView(ledger.name)
    take(view, ledger.publish(expected=1, nbytes=1, token="a0", output="a"))
    waiting = ledger.publish(expected=1, nbytes=1, token="a1", output="a")
    take(view, ledger.publish(expected=1, nbytes=1, token="b0", output="b"))  # another output's message
    assert sorted(f.token for f in ledger.collect(now_ns=clock.ns)) == ["a0", "b0"]
    take(view, waiting)


def test_a_node_with_two_inputs_on_one_output_passed_a_message_only_when_both_did(ledger, monkeypatch):
    clock = FakeClock(monkeypatch)
    view = LedgerView(ledger.name)  # one process, two inputs wired to the output: two claims each
    first = ledger.publish(expected=2, nbytes=1, token=0, output="o", per_process=2)
    second = ledger.publish(expected=2, nbytes=1, token=1, output="o", per_process=2)
    third = ledger.publish(expected=2, nbytes=1, token=2, output="o", per_process=2)
    take(view, first)
    take(view, first)
    take(view, third)  # input a dropped `second`; input b may still bring it
    assert [f.token for f in ledger.collect(now_ns=clock.ns)] == [0]
    take(view, second)  # input b's copy: still there
    take(view, third)
    assert sorted(f.token for f in ledger.collect(now_ns=clock.ns)) == [1, 2]


def test_a_receiver_that_stops_claiming_is_given_up_on_after_the_claim_timeout(ledger, monkeypatch):
    clock = FakeClock(monkeypatch)
    view = LedgerView(ledger.name)
    take(view, ledger.publish(expected=1, nbytes=1, token=0, output="o"))
    ignored = ledger.publish(expected=1, nbytes=1, token=1, output="o")
    assert [f.token for f in ledger.collect(now_ns=clock.ns)] == [0]
    assert ledger.collect(now_ns=clock.advance(4.9)) == []
    assert [f.token for f in ledger.collect(now_ns=clock.advance(0.2))] == [1]
    with pytest.raises(LedgerError, match="message expired"):
        view.claim(ignored)


def test_an_idle_output_does_not_make_its_receiver_look_gone(ledger, monkeypatch):
    """The receiver's last claim was a minute ago because nothing was sent: a new message is
    waited for the full timeout from its own publication."""
    clock = FakeClock(monkeypatch)
    view = LedgerView(ledger.name)
    take(view, ledger.publish(expected=1, nbytes=1, token=0, output="o"))
    assert len(ledger.collect(now_ns=clock.ns)) == 1
    clock.advance(60.0)
    fresh = ledger.publish(expected=1, nbytes=1, token=1, output="o")
    assert ledger.collect(now_ns=clock.advance(4.0)) == []
    take(view, fresh)


def _claim_in_order_then_exit(name, refs, claimed):
    view = LedgerView(name)
    for slot, generation in refs:
        view.claim(SlotRef(name, slot, generation))
        claimed.value += 1
        if claimed.value == 2:
            os._exit(0)  # dies after two: never claims the rest


def test_a_receiver_that_died_is_not_waited_for(ledger):
    ctx = mp.get_context("fork")
    refs = [ledger.publish(expected=1, nbytes=1, token=i, output="o") for i in range(4)]
    claimed = ctx.Value("i", 0)
    args = (ledger.name, [(r.slot, r.generation) for r in refs], claimed)
    proc = ctx.Process(target=_claim_in_order_then_exit, args=args)
    proc.start()
    proc.join(10)
    assert claimed.value == 2
    # Within the timeout: its claims died with it, and it will never claim the other two (the
    # first collect learns of it from the slots it claimed, newest first; a death changes no
    # slot, so the next full look, at most SWEEP_NS later, uses it).
    now = time.monotonic_ns()
    assert sorted(f.token for f in ledger.collect(now_ns=now)) == [0, 1]
    assert ledger.collect(now_ns=now + 1) == []  # unchanged slots are not looked at again so soon
    assert sorted(f.token for f in ledger.collect(now_ns=now + SWEEP_NS)) == [2, 3]


def _slow_receiver(name, refs, per_message_s, taken, expired):
    """A receiver process behind a backlog: claims each message in order, works on it, releases."""
    view = LedgerView(name)
    for slot, generation in refs:
        ref = SlotRef(name, slot, generation)
        try:
            view.claim(ref)
        except LedgerError:
            expired.value += 1  # "message expired: its producer reclaimed the memory"
            continue
        time.sleep(per_message_s)
        view.release(ref)
        taken.value += 1
    os._exit(0)


def test_a_slow_receiver_in_another_process_under_load_loses_nothing():
    """The GPU host's failure, on the CPU: 30 messages sent at once to a receiver that takes
    30 ms each (a backlog of 0.9 s) against a claim timeout of 0.3 s, the producer collecting
    all the while (as a send waiting under its cap does), beside a CPU hog. Taking back what
    was merely waiting showed up as "message expired" on the receiver's side."""
    ledger = Ledger(slots=64, claim_timeout_s=0.3)
    ctx = mp.get_context("fork")
    taken, expired = ctx.Value("i", 0), ctx.Value("i", 0)
    try:
        with cpu_hog(2):
            refs = [ledger.publish(expected=1, nbytes=1, token=i, output="data") for i in range(30)]
            args = (ledger.name, [(r.slot, r.generation) for r in refs], 0.03, taken, expired)
            proc = ctx.Process(target=_slow_receiver, args=args)
            proc.start()
            collected = []
            deadline = time.monotonic() + 60
            while len(collected) < 30 and time.monotonic() < deadline:
                collected += [f.token for f in ledger.collect()]
                time.sleep(0.002)
            proc.join(30)
        assert (taken.value, expired.value) == (30, 0)
        assert sorted(collected) == list(range(30))
    finally:
        ledger.close()


def test_a_failed_send_whose_message_was_claimed_after_all_is_left_to_collect(tmp_path):
    """dora may deliver a message and still raise from send_output (an interrupt): a receiver that
    claimed it keeps it, and the buffer returns only when it is released."""
    ledger = Ledger(4, claim_timeout_s=10.0)
    try:
        ref = ledger.publish(1, 100, "buffer", "out")
        view = LedgerView(ledger.name)
        view.claim(ref)
        assert ledger.abandon(ref) is None and ref.slot in ledger.live
        view.release(ref)
        assert [f.token for f in ledger.collect()] == ["buffer"]
        view.close()
    finally:
        ledger.close()


# ------------------------------------------------------- collect's cost: only what changed is looked at


def count_full_looks(led: Ledger, monkeypatch) -> list[int]:
    """Slots `collect` takes the lock on and looks at in full, in order (a wrapper records them)."""
    looked: list[int] = []
    real = led._finish_if_done

    def counting(slot, *args):
        looked.append(slot)
        return real(slot, *args)

    monkeypatch.setattr(led, "_finish_if_done", counting)
    return looked


def test_collect_looks_at_no_slot_that_did_not_change(monkeypatch):
    """A send collects: with 48 messages in flight, held or not yet claimed, it takes no lock and
    makes no process check for any of them until one changes (issue 30: every send cost ~7 us
    per message in flight, 0.2 ms with 32 held)."""
    led = Ledger(slots=64, claim_timeout_s=5.0)
    try:
        refs = [led.publish(expected=1, nbytes=1, token=i, output="o") for i in range(48)]
        view = LedgerView(led.name)
        for ref in refs[:16]:
            view.claim(ref)  # held: claimed, not released
        now = time.monotonic_ns()
        led.collect(now_ns=now)  # a full sweep learns the 16 claims
        looked = count_full_looks(led, monkeypatch)
        for step in range(1, 200):
            assert led.collect(now_ns=now + step) == []
        assert looked == []
        # A release changes its slot: that slot alone is looked at, and finished.
        view.release(refs[3])
        assert [f.token for f in led.collect(now_ns=now + 300)] == [3] and looked == [refs[3].slot]
        # A claim of the next message: looked at (it is held, so it stays).
        view.claim(refs[16])
        looked.clear()
        assert led.collect(now_ns=now + 400) == [] and looked == [refs[16].slot]
        # Past SWEEP_NS every live slot is looked at once more (deaths and timeouts change none).
        looked.clear()
        led.collect(now_ns=now + SWEEP_NS)
        assert sorted(looked) == sorted(r.slot for r in refs if r is not refs[3])
        view.close()
    finally:
        led.close()


def test_a_later_claim_still_accounts_for_an_earlier_message_at_once(monkeypatch):
    """progress.py's inference (a receiver that claimed a later message lost the earlier one)
    needs no sweep: the changed newer slot brings the older unclaimed ones into the same look."""
    led = Ledger(slots=8, claim_timeout_s=5.0)
    try:
        lost, later = (led.publish(expected=1, nbytes=1, token=t, output="o") for t in ("lost", "later"))
        now = time.monotonic_ns()
        view = LedgerView(led.name)
        assert led.collect(now_ns=now) == []
        view.claim(later)
        view.release(later)
        assert sorted(f.token for f in led.collect(now_ns=now + 1)) == ["later", "lost"]
        view.close()
    finally:
        led.close()


def test_a_ledger_name_that_is_not_a_file_this_process_can_map_is_a_ledger_error(tmp_path):
    """The name comes from the network: a directory, or a pipe, under it is refused as a
    LedgerError (the codec's DecodeError), never an OSError that a node counts as its own bug."""
    names = [f"tc-test-{os.getpid()}-dir", f"tc-test-{os.getpid()}-fifo"]
    paths = [os.path.join(ledger_file.SHM_DIR, name) for name in names]
    os.mkdir(paths[0])
    os.mkfifo(paths[1])
    try:
        with pytest.raises(LedgerError, match=r"ledger: 'tc-test-\d+-dir' cannot be opened: Is a directory"):
            LedgerView(names[0])
        with pytest.raises(
            LedgerError, match=r"ledger: 'tc-test-\d+-fifo': expected a regular file of this user, got a FIFO"
        ):
            LedgerView(names[1])
    finally:
        os.rmdir(paths[0])
        os.unlink(paths[1])


def test_a_release_takes_no_lock_and_a_late_one_is_read_as_none():
    """A release writes its holder's state word alone, tagged with the generation it claimed, so
    one that lands after its slot was freed and claimed again (its process taken for dead, in the
    moment between its look at the generation and its write) leaves the new claim holding, and
    the new claim's own release still counts."""
    ledger = Ledger(slots=1)
    try:
        view, other = LedgerView(ledger.name), LedgerView(ledger.name)
        first = ledger.publish(expected=1, nbytes=1, token="first")
        holder = view.claim(first)
        sections = view.file.sections
        view.release(first, holder)
        assert view.file.sections == sections  # no locked section
        assert [f.token for f in ledger.collect()] == ["first"]
        second = ledger.publish(expected=1, nbytes=1, token="second")  # the one slot again
        assert other.claim(second) == 0
        view.release(first, holder)  # late: the generation moved on, nothing is written
        at = ledger_file.slot_offset(0) + ledger_file.SLOT_HEAD_BYTES + ledger_file.STATE_WORD_AT
        assert ledger_file.STATE_WORD.unpack_from(ledger.file.map, at)[0] == ledger_file.holder_word(
            ledger_file.HOLDING, second.generation
        )
        # The write itself, had it passed its look at the generation just before the slot moved on:
        ledger_file.STATE_WORD.pack_into(
            ledger.file.map, at, ledger_file.holder_word(ledger_file.RELEASED, first.generation)
        )
        assert ledger.collect() == []  # read as none: `other` still holds it
        other.release(second, 0)  # and its own release still counts
        assert [f.token for f in ledger.collect()] == ["second"]
        view.close()
        other.close()
    finally:
        ledger.close()


def test_a_process_passing_over_a_message_it_also_reads_releases_its_own_entries(ledger):
    """A process with two inputs on one output reads a message (entry 0, held) and passes over a
    copy (entry 1, claimed and released at once): each release goes to its own entry, so the
    slot finishes once the reading is done."""
    ref = ledger.publish(expected=2, nbytes=1, token="m", per_process=2)
    view = LedgerView(ref.ledger)
    held = view.claim(ref)
    assert view.pass_over(ref)
    assert ledger.collect() == []  # entry 0 still held
    view.release(ref, held)
    assert [f.token for f in ledger.collect()] == ["m"]
    view.close()


def test_a_slot_another_process_wrote_is_forfeited_and_the_rest_of_the_batch_collected(ledger, caplog):
    """A collect that finds a slot's head rewritten by another process gives that message up,
    keeps its memory aside (never reused: whoever wrote the slot may use it) and still returns
    every other finished slot of the batch; the next collect does not trip on it again."""
    bad = ledger.publish(expected=0, nbytes=1, token="bad")
    good = ledger.publish(expected=0, nbytes=1, token="good")
    m, start = ledger.file.map, ledger_file.slot_offset(bad.slot)
    ledger_file.SLOT_HEAD.pack_into(m, start, bad.generation + 7, ledger_file.LIVE, 1, 0, 0, 0, 1)
    finished = ledger.collect()
    assert sorted((f.slot, f.token) for f in finished) == sorted([(good.slot, "good"), (bad.slot, None)])
    assert ledger.forfeited == ["bad"] and "changed by another process" in caplog.text
    assert ledger.collect() == []
