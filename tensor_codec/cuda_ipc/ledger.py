"""The release ledger: who still uses what a producer sent by CUDA IPC. One shared-memory file per
producer process (ledger_file.py), a slot per message in flight, which the producer `publish`es
(a new generation, so a stale reference never matches; a collect frees a slot at the next one)
and `collect`s, and each receiver `claim`s and `release`s. The rules: docs/wire-format.md, section
5a ("Lifetime"), and docs/cuda-ipc-design.md, "As built". Nothing here touches CUDA.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import NamedTuple

from ..errors import UsageError
from ..wire.cuda_ipc import HOLDERS
from .identity import pid_alive
from .ledger_file import (
    FREE,
    HOLDER,
    HOLDER_BYTES,
    HOLDING,
    LIVE,
    RELEASED,
    SHM_DIR,
    SLOT_BYTES,
    SLOT_HEAD,
    SLOT_HEAD_BYTES,
    STATE_WORD,
    STATE_WORD_AT,
    LedgerError,
    create_ledger_file,
    holder_word,
    open_ledger_file,
    remove_stale_ledgers,
    signature,
    slot_offset,
)
from .progress import OutputProgress

log = logging.getLogger("tensor_codec")

__all__ = ["Ledger", "LedgerView", "LedgerError", "SlotRef", "Finished", "remove_stale_ledgers", "HOLDERS"]

_NO_HOLDERS = bytes(SLOT_BYTES - SLOT_HEAD_BYTES)  # a published slot's holder entries
SWEEP_NS = 10_000_000  # a full look at every live slot at most this often (dead receivers, timeouts)
# A message that no receiver seen on its output claimed, or that a receiver which stopped claiming
# never took, is taken for lost after this long (progress.py; dora can drop messages).
CLAIM_TIMEOUT_S = 10.0


class SlotRef(NamedTuple):
    """What a message carries to name its slot (a tuple: one is made per message on each side)."""

    ledger: str  # file name under /dev/shm
    slot: int
    generation: int


class Finished(NamedTuple):
    """A collected slot: its memory may be reused (every receiver's GPU work on it completed)."""

    slot: int
    token: object  # None: forfeited (another process wrote its slot; the ledger keeps the token)
    unclaimed: int = 0  # expected claims it never got: > 0, given up for lost (dora dropped it, a receiver died)


class Ledger:
    """The producer's side: publish slots, collect finished ones. One per producer process."""

    def __init__(
        self,
        slots: int = 1024,
        *,
        claim_timeout_s: float = CLAIM_TIMEOUT_S,
        name: str | None = None,
        directory: str = SHM_DIR,
    ):
        if not 1 <= slots <= 65536:
            raise UsageError(f"slots: expected 1..65536, got {slots}")
        self.slots = slots
        self.claim_timeout_ns = int(claim_timeout_s * 1e9)
        self.name = name or f"tc-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.file = create_ledger_file(self.name, slots, directory)
        # slot -> (generation, producer's token, output, publish order, expected, per_process, the
        # slot's offset in the file): the producer's own copy of what it published, which a
        # receiver writing the file cannot change.
        self.live: dict[int, tuple[int, object, str, int, int, int, int]] = {}
        self.progress: dict[str, OutputProgress] = {}  # output -> how far its receivers got
        self.seen: dict[int, bytes] = {}  # live slot -> its `signature` at the last full look
        # Each slot's last generation published, the producer's own count (a receiver writing the
        # file cannot change it); a slot is freed at the next one, which its next publish takes.
        self.generations = [0] * slots
        self.forfeited: list[object] = []  # tokens of slots another process wrote: never given back
        self.last_sweep_ns = 0
        self.published = 0
        self.next_slot = 0
        self.closed = False

    def publish(self, expected: int, nbytes: int, token: object, output: str = "", per_process: int = 1) -> SlotRef:
        """Take a free slot for a message of `output` to `expected` receivers, each process claiming
        it at most `per_process` times (its inputs wired to the output); `token` (what keeps the
        memory alive) comes back from `collect`. LedgerError if every slot is in use."""
        if not 0 <= expected <= HOLDERS:
            raise UsageError(f"expected: receivers of one message, 0..{HOLDERS}, got {expected}")
        if not 1 <= per_process <= HOLDERS:
            raise UsageError(f"per_process: claims of one message by one process, 1..{HOLDERS}, got {per_process}")
        for _ in range(self.slots):
            slot = self.next_slot
            self.next_slot = (self.next_slot + 1) % self.slots
            if slot in self.live:
                continue
            start = slot_offset(slot)
            m = self.file.map
            # No lock: the slot was freed (under the lock) at the generation this publish takes,
            # so no receiver's reference can match it until this message is sent; a late one,
            # of the message before, reads an older generation however these writes land.
            generation = self.generations[slot] + 1
            self.generations[slot] = generation
            head = SLOT_HEAD.pack(generation, LIVE, per_process, expected, 0, time.monotonic_ns(), nbytes)
            m[start + SLOT_HEAD_BYTES : start + SLOT_BYTES] = _NO_HOLDERS
            m[start : start + SLOT_HEAD_BYTES] = head
            self.seen[slot] = head  # its `signature`: no holder claimed yet
            self.published += 1
            self.live[slot] = (generation, token, output, self.published, expected, per_process, start)
            if output not in self.progress:
                self.progress[output] = OutputProgress()
            return SlotRef(self.name, slot, generation)
        raise LedgerError(f"ledger: all {self.slots} slots hold messages still in use")

    def collect(self, *, now_ns: int | None = None) -> list[Finished]:
        """Free every finished slot; -> what the producer may now let go of.

        A send runs it only when it needs room (docs/cuda-ipc-design.md, "Collecting costs what
        changed"), and it looks under the lock only at the slots that changed since the last
        look, all of them in one locked section. An unlocked read that catches a write half-done
        either differs from what was seen (the locked look comes now) or still equals it (a claim
        writes its holder entry, outside the old bytes, before the head: the look comes at the next
        collect); it never decides anything by itself."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        sweep = now - self.last_sweep_ns >= SWEEP_NS or now < self.last_sweep_ns
        if sweep:
            self.last_sweep_ns = now
        m, seen = self.file.map, self.seen
        changed: set[str] = set()  # outputs with a slot that changed, newer than the ones to come
        candidates = []
        # Newest first (`live` is in publish order: a slot is deleted before it is taken again),
        # so what receivers claimed of later messages is known when an earlier one is decided.
        for slot, entry in reversed(list(self.live.items())):
            output = entry[2]
            if not sweep:
                # This loop runs over every message in flight at every send: the slot's bytes are
                # compared with its last `signature`, taken as long again (equal, it is unchanged).
                start, last = entry[6], seen.get(slot)
                if last is not None and m[start : start + len(last)] == last:
                    # With as many claims (holder entries in `last`) as receivers expected it waits
                    # for releases, not for progress.py's inference (claims by one process past its
                    # share, counted once in the full look, can only postpone that look to the next sweep).
                    if output not in changed or (len(last) - SLOT_HEAD_BYTES) // HOLDER_BYTES >= entry[4]:
                        continue  # nothing that could finish it has happened
                else:
                    changed.add(output)
            candidates.append((slot, entry))
        done: list[Finished] = []
        if not candidates:
            return done
        # One locked section for the batch: a claim of any slot waits for it (microseconds).
        with self.file.locked(slot_offset(0), self.slots * SLOT_BYTES):
            for slot, entry in candidates:
                try:
                    unclaimed = self._finish_if_done(slot, entry, now)
                except LedgerError as e:
                    # Another process wrote the slot's head: whoever did may use its memory, so
                    # the memory is kept, never reused (`forfeited`), and the message given up.
                    log.warning("cuda-ipc: %s; its message buffer is kept aside, never reused", e)
                    self.forfeited.append(entry[1])
                    done.append(Finished(slot, None, entry[4]))
                    continue
                if unclaimed is not None:
                    done.append(Finished(slot, entry[1], unclaimed))
        for f in done:
            del self.live[f.slot]
            self.seen.pop(f.slot, None)
        return done

    def _finish_if_done(self, slot: int, entry: tuple[int, object, str, int, int, int, int], now: int) -> int | None:
        """-> the expected claims it never got, once finished: no receiver holds it, and every one
        expected claimed it or will never claim it (progress.py). The caller holds the file's lock."""
        generation, _, output, order, expected, per_process, start = entry
        progress = self.progress[output]
        m = self.file.map
        # Taken before the holders are read: a release (unlocked) that lands after makes the next
        # collect's look differ; one taken after could hold a release this look did not see.
        seen = signature(m, start)
        gen, state, _, _, claims, published, _ = SLOT_HEAD.unpack_from(m, start)
        if gen != generation or state != LIVE:
            raise LedgerError(f"ledger: slot {slot} was changed by another process")
        holding = 0
        claimers: dict[int, int] = {}  # claims per receiving process, at most `per_process` each
        claimed_ns: dict[int, int] = {}
        counted = 0
        released = holder_word(RELEASED, gen)  # a release at another generation's is none of this one's
        for h in range(min(claims, HOLDERS)):
            at = start + SLOT_HEAD_BYTES + h * HOLDER_BYTES
            pid, _, when = HOLDER.unpack_from(m, at)
            word = STATE_WORD.unpack_from(m, at + STATE_WORD_AT)[0]  # (one read: a release writes it unlocked)
            times = claimers.get(pid, 0)
            if times < per_process:
                claimers[pid] = times + 1
                counted += 1
            if when > claimed_ns.get(pid, 0):
                claimed_ns[pid] = when
            # A receiver that died holding it no longer uses it: its CUDA context is gone.
            if word != released and pid_alive(pid):
                holding += 1
        progress.saw(order, claimers, claimed_ns)
        timeout = self.claim_timeout_ns
        # Receivers never seen on this output (not tensor_codec nodes, or dora dropped all they
        # got) are given up on after the claim timeout, as nothing will tell otherwise.
        if holding or not (
            counted >= expected
            or progress.accounted(order, claimers, published, now, timeout) >= expected
            or (progress.known() < expected and now - published >= timeout)
        ):
            self.seen[slot] = seen
            return None
        SLOT_HEAD.pack_into(m, start, gen + 1, FREE, per_process, expected, claims, published, 0)
        return max(0, expected - counted)

    def abandon(self, ref: SlotRef) -> object | None:
        """Take back a slot whose message never left (its send failed); -> its token, or None for a
        slot some receiver claimed after all (dora delivered before the send raised): `collect`'s."""
        entry = self.live.get(ref.slot)
        if entry is None or entry[0] != ref.generation:
            return None
        start = slot_offset(ref.slot)
        with self.file.locked(start, SLOT_BYTES):
            gen, _, per_process, expected, claims, published, _ = SLOT_HEAD.unpack_from(self.file.map, start)
            if claims:
                return None
            SLOT_HEAD.pack_into(self.file.map, start, gen + 1, FREE, per_process, expected, claims, published, 0)
        del self.live[ref.slot]
        self.seen.pop(ref.slot, None)
        return entry[1]

    def close(self) -> None:
        """Remove the file (receivers that mapped it keep their mapping until they close it)."""
        if self.closed:
            return
        self.closed = True
        try:
            os.unlink(self.file.path)
        except FileNotFoundError:
            pass
        self.file.close()


class LedgerView:
    """A receiver's side of one producer's ledger: claim and release slots."""

    def __init__(self, name: str, *, directory: str = SHM_DIR):
        self.name = name
        self.file, self.slots = open_ledger_file(name, directory)
        self.pid = os.getpid()
        # Claims of its receiver not given back yet, counted by receiving.Receiver (under its lock):
        # a view it let go of stays open until the last of them is released.
        self.holds = 0
        # slot -> the generation this process last passed over (`pass_over`); at most one entry per slot.
        self.passed: dict[int, int] = {}

    def _check(self, ref: SlotRef) -> int:
        if type(ref.slot) is not int or not 0 <= ref.slot < self.slots:
            raise LedgerError(f"ledger slot: expected 0..{self.slots - 1}, got {ref.slot!r}")
        return slot_offset(ref.slot)

    def claim(self, ref: SlotRef) -> int:
        """Register this process as a user of the message -> its holder entry (for `release`);
        LedgerError if it is gone, or if this process already claimed it as many times as it
        may (one per input wired to the output)."""
        start = self._check(ref)
        m, f = self.file.map, self.file
        f.lock(start, SLOT_BYTES)
        try:
            gen, state, per_process, expected, claims, published, nbytes = SLOT_HEAD.unpack_from(m, start)
            if gen != ref.generation or state != LIVE:
                raise LedgerError(_expired(ref, gen if state == LIVE else max(gen - 1, 0)))
            if claims >= HOLDERS:
                raise LedgerError(f"ledger slot {ref.slot}: more than {HOLDERS} receivers claimed one message")
            holders = range(start + SLOT_HEAD_BYTES, start + SLOT_HEAD_BYTES + claims * HOLDER_BYTES, HOLDER_BYTES)
            mine = sum(HOLDER.unpack_from(m, at)[0] == self.pid for at in holders) if claims else 0  # released ones too
            if mine >= per_process:
                raise LedgerError(
                    f"ledger slot {ref.slot}, generation {ref.generation}: this process (pid {self.pid}) already "
                    f"claimed the message {mine} time(s), as many as its producer allows one process (its inputs "
                    f"wired to the output); a copy of a message counts once"
                )
            at = start + SLOT_HEAD_BYTES + claims * HOLDER_BYTES
            HOLDER.pack_into(m, at, self.pid, 0, time.monotonic_ns())
            STATE_WORD.pack_into(m, at + STATE_WORD_AT, holder_word(HOLDING, gen))
            SLOT_HEAD.pack_into(m, start, gen, state, per_process, expected, claims + 1, published, nbytes)
        finally:
            f.unlock(start, SLOT_BYTES)
        return claims

    def pass_over(self, ref: SlotRef) -> bool:
        """Claim and release at once (a monitor's part in a message); -> False, doing nothing, for a
        copy of a message this process passed over already. LedgerError as `claim` otherwise."""
        try:
            holder = self.claim(ref)
        except LedgerError:
            if self.passed.get(ref.slot) == ref.generation:
                return False  # claimed before, and now collected or claimed as often as it may be
            raise
        self.passed[ref.slot] = ref.generation
        self.release(ref, holder)
        return True

    def release(self, ref: SlotRef, holder: int | None = None) -> None:
        """This process is done with the message (its GPU work on it completed); `holder`: the
        entry its claim took (`claim`'s answer; None: this process's first entry still holding).
        No lock: the one write is this holder's state word, tagged with the generation it was
        claimed at, so a release that comes after its slot was freed (this process taken for
        dead) and claimed again is read as none by the producer."""
        start = self._check(ref)
        if self.file.closed:
            return  # its producer is gone (receiving.Receiver closes a view others hold only then)
        m = self.file.map
        holding, released = holder_word(HOLDING, ref.generation), holder_word(RELEASED, ref.generation)
        if SLOT_HEAD.unpack_from(m, start)[0] != ref.generation:
            return  # already collected (this process was taken for dead, or released twice)
        for h in range(HOLDERS) if holder is None else (holder,):
            if not 0 <= h < HOLDERS:
                return
            at = start + SLOT_HEAD_BYTES + h * HOLDER_BYTES
            if HOLDER.unpack_from(m, at)[0] != self.pid:
                continue
            word = STATE_WORD.unpack_from(m, at + STATE_WORD_AT)[0]
            # Its own entry, not released yet: whatever a late release of another process wrote
            # over the word (read as none by the producer), this one's release still counts.
            if word != released and (holder is not None or word == holding):
                STATE_WORD.pack_into(m, at + STATE_WORD_AT, released)
                return

    def close(self) -> None:
        self.file.close()


def _expired(ref: SlotRef, generation: int) -> str:
    """Why a slot whose last published generation is `generation` does not hold the message `ref`
    names: freed (the same generation, no longer live: its producer collected it; a freed slot's
    head holds the generation its next publish takes) or reused (a newer generation)."""
    where = f"slot {ref.slot}, generation {ref.generation}"
    why = (
        "every receiver it expected had taken it, or it had given it up for lost (this process claimed "
        "nothing on that output for the claim timeout, or had claimed a later message)"
    )
    if generation >= ref.generation:
        what = "freed, not reused" if generation == ref.generation else f"reused, now generation {generation}"
        return f"message expired: its producer reclaimed the memory ({where}: {what}); {why}"
    return (
        f"message expired or never sent: {where} names a generation its producer has not published "
        f"(the slot is at generation {generation})"
    )
