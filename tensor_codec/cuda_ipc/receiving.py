"""A receiving process's side of CUDA IPC: open messages (claim, open, wait, view), and release
each once its last view died and the GPU work queued until then completed (a pooled marker,
polled on the caller's own thread when a view dies and at every decode, and by a timer thread
only while a release waits on its marker). The steps and why: docs/cuda-ipc-design.md,
"The protocol" (receiving) and "Release without events".
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import DecodeError
from ..wire.cuda_ipc import buffer_key, message_slot, parse_ipc_fields
from .handle_cache import HandleCache
from .identity import pid_alive
from .ledger import SHM_DIR, LedgerError, LedgerView, SlotRef

__all__ = ["Receiver"]

log = logging.getLogger("tensor_codec")

MAX_LEDGERS = 64  # producers followed at once
MAX_SEGMENTS = 256  # opened producer segments kept (a producer's pool holds a few per output)
MAX_EVENTS = 1024  # opened producer events kept (one per pooled buffer)
# Buffers known by their keys (`Receiver.buffers`) only where the handle's text is this short: a
# cudaIpc handle is 88 characters; an expandable segment's lists a page each (up to 1.4 MB).
MAX_KNOWN_HANDLE_CHARS = 4096
# While a release waits on its marker, the timer looks this often: a quiet receiver (no decode to
# poll at) gives memory back within about this long of its GPU work completing.
TIMER_S = 0.002
TIMER_IDLE_TICKS = 50  # ticks with nothing pending before the timer thread ends (started again on demand)


class _KnownBuffer(NamedTuple):
    """A producer buffer this receiver has opened a message in (`Receiver.buffers`)."""

    segment: Any
    event: Any
    gpu: int  # its index here
    offset: int  # of the buffer inside the segment
    producer: Any  # the identity it was checked with (another one is checked in full)


class Receiver:
    def __init__(self, backend: Any, *, directory: str = SHM_DIR):
        self.backend = backend
        self.directory = directory  # where producers' ledgers are (their names come in messages)
        self.segments = HandleCache(backend.open_segment, max_entries=MAX_SEGMENTS)
        self.events = HandleCache(backend.open_event, max_entries=MAX_EVENTS)
        self.ledgers: collections.OrderedDict[str, LedgerView] = collections.OrderedDict()
        self.retired: dict[str, LedgerView] = {}  # let go of while claims of it were held (`_ledger`)
        # (ledger, a buffer's keys as they came) -> what a message in a producer buffer seen
        # before opens with (`open`).
        self.buffers: dict[tuple, _KnownBuffer] = {}
        # Re-entrant: a message's last view can die (and its memory's `on_gone` run) on any line of this thread.
        self.lock = threading.RLock()
        self.pending: list[tuple[Any, int, LedgerView, SlotRef, int | None]] = []  # (marker, GPU, ledger, slot, holder)
        self.idle_markers: dict[int, list[Any]] = {}  # per GPU: markers whose last record completed
        self.timer: threading.Thread | None = None  # runs only while releases wait on markers
        self.timer_ticks = 0  # the timer thread's wake-ups, all told (a steady stream needs none)
        self.claimed = 0
        self.released = 0
        self.passed = 0  # claimed and released at once, never opened (pass_unread)
        self.passed_again = 0  # copies of messages passed already: nothing claimed (pass_unread)
        self.releasing = 0  # taken off `pending` by a poll, not yet given back to its ledger

    # ---- opening
    def _ledger(self, name: str) -> LedgerView:
        """The view of producer ledger `name`, with a hold taken on it for the claim to come
        (`_drop_hold` when that is done with: `_give_back`). At most MAX_LEDGERS are followed; one
        let go of while claims of it are held is kept aside (`retired`) until the last is given
        back. One view per ledger, opened under the lock: a POSIX record lock is the process's,
        and closing any descriptor of the file would drop those another view holds."""
        with self.lock:
            view = self.ledgers.get(name)
            if view is not None:
                self.ledgers.move_to_end(name)
            else:
                view = self.retired.pop(name, None)
                if view is None:
                    view = LedgerView(name, directory=self.directory)  # LedgerError if the file is gone, or not ours
                self.ledgers[name] = view
                while len(self.ledgers) > MAX_LEDGERS:
                    old_name, old = self.ledgers.popitem(last=False)
                    if old.holds:
                        self.retired[old_name] = old  # closed when its last claim is given back
                    else:
                        old.close()
            view.holds += 1
            return view

    def _drop_hold(self, view: LedgerView) -> None:
        """A hold `_ledger` took is done with (its claim given back, or never made): a view let go
        of meanwhile closes with its last."""
        with self.lock:
            view.holds -= 1
            if not view.holds and self.retired.get(view.name) is view:
                del self.retired[view.name]
                view.close()

    def _give_back(self, view: LedgerView, ref: SlotRef, holder: int | None) -> None:
        """Release a claim to its producer and drop the view's hold on it (`_drop_hold`: the
        receiver's lock, re-entrant, and a close where the view was let go of); never raises (it
        runs in deleters and the timer)."""
        _release(view, ref, holder)
        self._drop_hold(view)

    def _forget_producer(self, ledger: str) -> None:
        self.segments.forget(ledger)
        self.events.forget(ledger)
        with self.lock:
            self.buffers = {key: known for key, known in self.buffers.items() if key[0] != ledger}
            views = [self.ledgers.pop(ledger, None), self.retired.pop(ledger, None)]
        for view in views:
            if view is not None:
                view.close()  # its producer exited: what this process still holds of it is moot

    def _slot(self, producer: Any, slot: int, generation: int) -> tuple[LedgerView, SlotRef]:
        """Finish what completed, then find the message's ledger slot, before any CUDA work;
        DecodeError if its producer (of this pid namespace: `check_same_machine`) has exited or
        its ledger cannot be opened."""
        if self.pending:
            self.poll()
        if not pid_alive(producer.pid):
            self._forget_producer(producer.ledger)
            raise DecodeError(
                f"tc.header.producer.pid: the producer (process {producer.pid}) has exited; its GPU memory is gone"
            )
        try:
            return self._ledger(producer.ledger), SlotRef(producer.ledger, slot, generation)
        except LedgerError as e:
            raise _slot_error(e) from None

    def open(
        self,
        producer: Any,
        metadata: dict,
        total: int,
        check_producer: Callable[[Any], None],
        local_index: Callable[[], int],
    ) -> tuple[Any, Any, int]:
        """Claim, open, wait, view -> (uint8 tensor over the message of `total` bytes, its lifetime
        object, the index of its GPU here, found by `local_index()`, which may start CUDA: only
        once claimed). A message in a producer buffer seen before (its ledger and keys as they
        came) is known by them: its producer passed `check_producer`, its segment, event and GPU
        are those found then, and only its own fields are read. DecodeError for every refusal; a
        claim is given back if anything after it fails."""
        key = buffer_key(metadata)
        known = None if key is None else self.buffers.get((producer.ledger, *key))
        if known is not None and known.producer is not producer and known.producer != producer:
            known = None  # the same keys under another identity: checked in full, as any new one
        fields = None
        if known is None:
            fields = parse_ipc_fields(metadata, total)
            check_producer(producer)
            slot, generation = fields.slot, fields.generation
        else:
            slot, generation = message_slot(metadata, total)
        ledger, ref = self._slot(producer, slot, generation)
        try:
            holder = ledger.claim(ref)
        except LedgerError as e:
            self._drop_hold(ledger)
            raise _slot_error(e) from None
        except BaseException:
            self._drop_hold(ledger)
            raise
        try:
            self.claimed += 1
            if known is None:
                assert fields is not None
                index = local_index()
                pid = producer.pid
                segment = self.segments.get(producer.ledger, pid, fields.handle, index, fields.offset, fields.size)
                event = self.events.get(producer.ledger, pid, fields.event, index)
                known = _KnownBuffer(segment, event, index, fields.offset, producer)
                if key is not None and len(key[0]) <= MAX_KNOWN_HANDLE_CHARS:
                    with self.lock:
                        if len(self.buffers) >= MAX_SEGMENTS:
                            self.buffers.clear()
                        self.buffers[(producer.ledger, *key)] = known
            segment, event, index, offset = known.segment, known.event, known.gpu, known.offset
            if segment.end is not None and segment.base + offset + total > segment.end:
                raise DecodeError(
                    f"tc.ipc.offset: expected the message inside the producer's segment of "
                    f"{segment.end - segment.base} bytes, got bytes {offset}..{offset + total}"
                )
            self.backend.wait(event, index)
            view, memory = self.backend.message_view(segment, offset, total, index)
        except DecodeError:
            self._give_back(ledger, ref, holder)
            raise
        except ProcessLookupError as e:
            self._give_back(ledger, ref, holder)
            self._forget_producer(producer.ledger)
            raise DecodeError(f"tc.header.producer.pid: {e}") from None
        except Exception as e:  # the driver refused the handle or event: a clear error, not a crash
            self._give_back(ledger, ref, holder)
            raise DecodeError(
                f"tc.ipc.handle: could not open the producer's GPU memory: {type(e).__name__}: {str(e)[:300]}"
            ) from None
        except BaseException:  # (KeyboardInterrupt, SystemExit): the claim is given back, not held till exit
            self._give_back(ledger, ref, holder)
            raise
        memory.on_gone = (self._on_last_view_gone, ledger, ref, index, holder)
        return view, memory, index

    def pass_unread(self, producer: Any, fields: Any) -> None:
        """Claim and release at once a message this process looks at but will not read (a
        monitor; docs/cuda-ipc-design.md, "Claims are per receiver"). DecodeError when the slot
        cannot be claimed (the producer has exited, or had already given the message up)."""
        ledger, ref = self._slot(producer, fields.slot, fields.generation)
        try:
            first = ledger.pass_over(ref)
        except LedgerError as e:
            raise _slot_error(e) from None
        finally:
            self._drop_hold(ledger)
        with self.lock:
            if first:
                self.passed += 1
            else:
                self.passed_again += 1

    # ---- releasing
    def _on_last_view_gone(self, ledger: LedgerView, ref: SlotRef, index: int, holder: int | None = None) -> None:
        """Every view of a message died (called from torch's deleter, any thread): record its
        marker and give back, on this thread, whatever has completed (this message too, where
        its GPU work already has); only what still waits is left to the timer."""
        if sys.is_finalizing():
            # Nothing given back from here: GPU work this process queued on the message may still
            # run. Its producer takes the message back once this process is gone (a holder whose
            # pid has exited holds nothing: ledger.Ledger.collect).
            return
        try:
            with self.lock:
                idle = self.idle_markers.get(index)
                marker = idle.pop() if idle else None
            if marker is None:  # made outside the lock: a CUDA call
                marker = self.backend.new_marker(index)
            self.backend.record_marker(marker, index)
        except Exception as e:  # never raise out of a deleter
            log.warning("cuda-ipc: releasing a message without a completion marker: %s", e)
            marker = None
        if _completed(marker):
            # Given back here and now, without the pending list: the release outside the lock
            # (it may log), its bookkeeping in one section.
            _release(ledger, ref, holder)
            with self.lock:
                if marker is not None:
                    self.idle_markers.setdefault(index, []).append(marker)
                self._drop_hold(ledger)
                self.released += 1
        else:
            with self.lock:  # (poll swaps the list: an append outside the lock could land in one it has read)
                self.pending.append((marker, index, ledger, ref, holder))
        if self.pending:
            self.poll()

    def poll(self) -> int:
        """Release every pending message whose completion marker has fired; -> how many. What
        still waits is the timer's: started here if it is not running."""
        if not self.pending:  # (read without the lock: one appended meanwhile waits for the next poll)
            return 0
        with self.lock:
            if not self.pending:
                return 0
            # Take the list: a finalizer running on this thread inside the loop (the lock is
            # re-entrant) appends to a new one, which must not be lost.
            entries, self.pending = self.pending, []
            ready: list = []
            waiting: list = []
            for entry in entries:
                (ready if _completed(entry[0]) else waiting).append(entry)
            self.pending.extend(waiting)
            self.releasing += len(ready)
            for marker, index, _, _, _ in ready:
                if marker is not None:
                    self.idle_markers.setdefault(index, []).append(marker)
        for _, _, ledger, ref, holder in ready:
            _release(ledger, ref, holder)
        with self.lock:
            for _, _, ledger, _, _ in ready:
                self._drop_hold(ledger)
            self.releasing -= len(ready)
            self.released += len(ready)
            if self.pending and (self.timer is None or not self.timer.is_alive()):
                timer = threading.Thread(target=self._tick, name="tc-ipc-release", daemon=True)
                try:
                    timer.start()
                    self.timer = timer
                except RuntimeError as e:  # no thread to be had (shutting down): the next poll tries again
                    log.warning("cuda-ipc: no release timer thread: %s", e)
        return len(ready)

    def settled(self) -> bool:
        """No release waiting for its marker and none half given back (whichever thread polls)."""
        with self.lock:
            return not self.pending and not self.releasing

    def _tick(self) -> None:
        """The timer thread: every TIMER_S it gives back what completed; nothing wakes it but
        time, and it ends once nothing has waited for TIMER_IDLE_TICKS ticks (under the lock, so a
        release that finds no timer starts one)."""
        idle = 0
        while True:
            time.sleep(TIMER_S)
            with self.lock:
                self.timer_ticks += 1
            self.poll()
            with self.lock:
                idle = 0 if self.pending else idle + 1
                if idle >= TIMER_IDLE_TICKS:
                    self.timer = None
                    return

    def stats(self) -> dict:
        return {
            "claimed": self.claimed,
            "released": self.released,
            "passed_unread": self.passed,
            "passed_again": self.passed_again,
            "pending_release": len(self.pending) + self.releasing,
            "segments_open": len(self.segments),
            "segment_cache_hits": self.segments.hits,
            "segment_cache_misses": self.segments.misses,
            "events_open": len(self.events),
            "event_cache_misses": self.events.misses,
        }


def _slot_error(e: LedgerError) -> DecodeError:
    """A ledger's refusal as the codec's error, naming the message field it concerns."""
    return DecodeError(f"tc.ipc.slot: {e}")


def _completed(marker: Any) -> bool:
    """Whether the GPU work a completion marker follows has run (None: there is none to wait for)."""
    try:
        return marker is None or marker.query()
    except Exception:
        return True  # the context is gone: nothing of ours still runs on it


def _release(view: LedgerView, ref: SlotRef, holder: int | None) -> None:
    """Give a claimed message back to its producer (`LedgerView.release`: no lock, no system
    call); never raises (it runs in deleters and the timer)."""
    try:
        view.release(ref, holder)
    except Exception as e:
        log.warning("cuda-ipc: could not release ledger slot %d: %s", ref.slot, e)
