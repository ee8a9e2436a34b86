"""The CUDA IPC steady-state contract (issue 30), counted by the CPU stand-in backend: after a
warm-up, a stream of messages of mixed sizes allocates, exports, opens and creates nothing; each
message costs exactly one event record on the producer, and one stream wait, one view and one
release marker record on each receiver. Set-up operations cost hundreds of microseconds to
milliseconds each on a GPU (docs/cuda-ipc-design.md); these counts hold on every machine.

Two forms: producer and receiver in one process (`fake`), and a producer with two receiving
processes, one of which is killed (SIGKILL) in the middle of a message."""

from __future__ import annotations

import base64
import json
import os
import random
import select
import subprocess
import sys
import time
from collections import Counter, deque

import pytest
import torch

import tensor_codec as tc
from tensor_codec.cuda_ipc import transport as cuda_ipc
from tests.support.fakes import FakeNode
from tests.support.ipc_fake_backend import ENV_DIR, SETUP_OPS
from tests.support.paths import ROOT

# Message sizes in bytes: below one size class, inside one, across several, past a 64 KiB segment.
SIZES = (1, 700, 4096, 5000, 20_000, 65_536, 200_000)
MESSAGES = 1000
HELD = 3  # messages the receiver holds at once in the one-process form


def _message(seq: int, size: int) -> torch.Tensor:
    return torch.full((size,), seq % 251, dtype=torch.uint8)


def _settle() -> None:
    """Every dropped message given back by the receiver and collected by the producer (the
    receiver's own release thread may be giving some back: wait until it is done)."""
    state = cuda_ipc._get_state()
    deadline = time.monotonic() + 10
    while True:
        state.receiver.poll()
        if state.receiver.settled():
            break
        assert time.monotonic() < deadline, "the receiver did not give its messages back"
        time.sleep(0.0005)
    state.producer.collect()


def _live_slots(state) -> list[dict]:
    """What the producer's ledger holds of the messages it has not collected: each slot's head
    and holder entries as the file has them now (what a failed collect assertion shows)."""
    from tensor_codec.cuda_ipc.identity import pid_alive
    from tensor_codec.cuda_ipc.ledger_file import (
        HOLDER,
        HOLDER_BYTES,
        SLOT_HEAD,
        SLOT_HEAD_BYTES,
        STATE_WORD,
        STATE_WORD_AT,
        slot_offset,
    )

    ledger = state.producer.ledger
    m, slots = ledger.file.map, []
    for slot, entry in ledger.live.items():
        start = slot_offset(slot)
        generation, slot_state, per_process, expected, claims, _, nbytes = SLOT_HEAD.unpack_from(m, start)
        holders = []
        for h in range(claims):
            at = start + SLOT_HEAD_BYTES + h * HOLDER_BYTES
            pid = HOLDER.unpack_from(m, at)[0]
            word = STATE_WORD.unpack_from(m, at + STATE_WORD_AT)[0]
            holders.append({"pid": pid, "alive": pid_alive(pid), "state": word & 0xFF, "generation": word >> 8})
        slots.append(
            {
                "slot": slot,
                "generation": generation,
                "published_generation": entry[0],
                "state": slot_state,
                "expected": expected,
                "per_process": per_process,
                "claims": claims,
                "nbytes": nbytes,
                "holders": holders,
                "seen": ledger.seen.get(slot, b"").hex(),
            }
        )
    return slots


def _delta(after: Counter, before: Counter) -> dict:
    return {name: after.get(name, 0) - before.get(name, 0) for name in set(after) | set(before)}


def test_one_receiver_steady_state_opens_and_creates_nothing(fake):
    """1,000 messages of mixed sizes, three held at a time, after every size class was used as
    often at once as steady state ever needs it."""
    held: deque = deque()

    def send_one(seq: int, size: int) -> None:
        value, metadata = tc.encode(_message(seq, size), transport="cuda-ipc")
        got = tc.decode(value, metadata)
        # The receiver waited on this message's own event, and reads this message's bytes.
        assert fake.events_waited[-1] == base64.b64decode(metadata["tc.ipc.event"])
        assert got.numel() == size and bool((got == seq % 251).all())
        held.append((seq, got))
        if len(held) > HELD:
            oldest, view = held.popleft()
            # Still intact after three later messages: no buffer in use was handed out again.
            assert bool((view == oldest % 251).all()), f"message {oldest} was overwritten while held"
            del view  # its last view dies: its release begins
            _settle()

    seq = 0
    for size in SIZES:  # warm-up: each class HELD + 1 times in a row (the most ever live at once)
        for _ in range(2 * (HELD + 1)):
            send_one(seq, size)
            seq += 1
    before = Counter(fake.ops)
    rng = random.Random(30)
    for _ in range(MESSAGES):
        send_one(seq, rng.choice(SIZES))
        seq += 1
    steady = _delta(fake.ops, before)

    assert {name: steady[name] for name in SETUP_OPS} == dict.fromkeys(SETUP_OPS, 0), steady
    assert steady.get("retire", 0) == 0
    assert steady["record"] == MESSAGES  # the producer's event, once per message
    assert steady["wait"] == MESSAGES  # the receiver's stream, once per message
    assert steady["message_view"] == MESSAGES
    assert steady["record_marker"] == MESSAGES  # the receiver's release marker, pooled
    assert tc.ipc_stats()["receiver"]["segment_cache_misses"] == len(fake.opened)


# ------------------------------------------------------------------ two receiving processes


class _ReceiverProcess:
    def __init__(self, directory: str):
        env = dict(os.environ, **{ENV_DIR: directory, "PYTHONPATH": str(ROOT)})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.ipc_receiver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )

    def ask(self, request: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def reply(self, timeout_s: float = 60.0) -> dict:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        assert ready, f"the receiver said nothing for {timeout_s} s"
        line = self.proc.stdout.readline()
        assert line, f"the receiver exited (status {self.proc.poll()})"
        return json.loads(line)

    def ops(self) -> Counter:
        self.ask({"ops": True})
        return Counter(self.reply()["ops"])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()  # reaped: its pid is gone, as the ledger checks

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.mark.slow
def test_two_receiving_processes_one_killed_midway(fake, tmp_path):
    """1,000 messages to two receiving processes; one is killed while it holds message 500. The
    producer collects that message at once (its holder is gone) and every later one with only
    the survivor's release (the dead receiver is accounted for): no set-up operation anywhere in
    steady state, before or after the kill."""
    node = FakeNode(
        node_id="cam",
        descriptor={
            "nodes": [
                {"id": "cam", "outputs": ["image"]},
                {"id": "a", "inputs": {"x": "cam/image"}},
                {"id": "b", "inputs": {"x": "cam/image"}},
            ]
        },
    )
    receivers = [_ReceiverProcess(str(tmp_path)), _ReceiverProcess(str(tmp_path))]
    survivor, victim = receivers
    state = cuda_ipc._get_state()
    try:

        def send_one(seq: int, size: int, to: list) -> dict:
            node.sent.clear()
            tc.send(node, "image", _message(seq, size), transport="cuda-ipc")
            (_, _, metadata) = node.sent[-1]
            for r in to:
                r.ask({"decode": seq, "metadata": metadata, "numel": size})
            return metadata

        def acked(seq: int, r: _ReceiverProcess) -> None:
            assert r.reply() == {"ack": seq}

        seq = 0
        for size in SIZES:  # warm-up: one message of each class in flight at a time
            for _ in range(2):
                send_one(seq, size, receivers)
                for r in receivers:
                    acked(seq, r)
                state.producer.collect()
                seq += 1
        before = Counter(fake.ops)
        before_receivers = [r.ops() for r in receivers]

        rng = random.Random(30)
        victim_steady = None
        for i in range(MESSAGES):
            size = rng.choice(SIZES)
            if i == MESSAGES // 2:
                victim_steady = _delta(victim.ops(), before_receivers[1])
                send_one(seq, size, receivers)
                victim.kill()  # somewhere in decoding (or about to): it may hold the message
                acked(seq, survivor)
            else:
                send_one(seq, size, [survivor] if i > MESSAGES // 2 else receivers)
                for r in [survivor] if i > MESSAGES // 2 else receivers:
                    acked(seq, r)
            state.producer.collect()
            assert state.producer.in_flight() == 0, f"message {seq} was not collected: {_live_slots(state)}"
            seq += 1

        producer = _delta(fake.ops, before)
        assert {name: producer.get(name, 0) for name in ("allocate", "export", "new_event", "retire")} == {
            "allocate": 0,
            "export": 0,
            "new_event": 0,
            "retire": 0,
        }, producer
        assert producer["record"] == MESSAGES

        receiving = _delta(survivor.ops(), before_receivers[0])
        assert victim_steady is not None
        for steady, received in ((receiving, MESSAGES), (victim_steady, MESSAGES // 2)):
            assert {name: steady.get(name, 0) for name in SETUP_OPS} == dict.fromkeys(SETUP_OPS, 0), steady
            assert steady["wait"] == steady["message_view"] == steady["record_marker"] == received
    finally:
        for r in receivers:
            r.close()
