"""A sending process's side of CUDA IPC: what it has in flight, per output, and when it may reuse it.

Every message goes in a message buffer of its own (pool.py), shared through a slot of this
process's ledger; the buffer is the slot's token, given back to `recycle` (the pool) once the
ledger collects the slot. Each output has a cap on bytes in flight (inflight.py). Why:
docs/cuda-ipc-design.md, "The protocol" (sending).
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .inflight import InFlightLimit
from .ledger import SHM_DIR, Ledger, LedgerError, SlotRef, remove_stale_ledgers

__all__ = ["ProducerBook"]

log = logging.getLogger("tensor_codec")

# A send with no idle buffer of its size collects finished messages first only when that frees
# enough to be worth a look at the ledger: this many messages are uncollected, or the message is
# big. A stream of small messages therefore keeps up to this many buffers of its size and
# collects them in one locked section every so many messages, not one at every send.
COLLECT_BATCH = 8
BATCH_MAX_BYTES = 1 << 20  # messages bigger than this collect first (a buffer more would cost more memory)


@dataclass
class _Output:
    limit: InFlightLimit
    live_bytes: int = 0
    peak_bytes: int = 0
    sent: int = 0
    lost: int = 0  # messages given up with claims missing: dora lost them on the way (or a receiver died)


class ProducerBook:
    """The sending process's bookkeeping: its ledger, per output what is in flight and the cap."""

    def __init__(self, *, recycle: Callable[..., None], directory: str = SHM_DIR):
        self._directory = directory  # where its ledger goes, and stale ones are looked for
        self._recycle = recycle
        self._ledger: Ledger | None = None
        self.outputs: dict[str, _Output] = {}
        self.settings: dict[str, dict[str, Any]] = {}  # output -> InFlightLimit's arguments it was given
        self.slot_output: dict[int, tuple[str, int]] = {}  # live slot -> (output, bytes)
        self.lock = threading.RLock()

    @property
    def has_ledger(self) -> bool:
        """Whether this process ever sent by CUDA IPC (made its ledger)."""
        return self._ledger is not None

    def in_flight(self) -> int:
        """Messages sent and not yet released (or reclaimed)."""
        with self.lock:
            return len(self.slot_output)

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            remove_stale_ledgers(directory=self._directory)
            self._ledger = Ledger(directory=self._directory)
            atexit.register(self._ledger.close)
        return self._ledger

    def configure(self, output_id: str, **given: Any) -> None:
        """Set the output's cap (InFlightLimit's arguments); one left None keeps its value. A bad
        one raises here, changing nothing."""
        with self.lock:
            settings = {**self.settings.get(output_id, {}), **{k: v for k, v in given.items() if v is not None}}
            limit = self._limit(output_id, settings)
            self.settings[output_id] = settings
            out = self.outputs.get(output_id)
            if out is not None:
                out.limit = limit

    def _limit(self, output_id: str, settings: dict[str, Any]) -> InFlightLimit:
        return InFlightLimit(**settings, name=f"output '{output_id}'")

    def output(self, output_id: str) -> _Output:
        out = self.outputs.get(output_id)
        if out is None:
            out = self.outputs[output_id] = _Output(self._limit(output_id, self.settings.get(output_id, {})))
        return out

    def admit(self, output_id: str, nbytes: int) -> bool:
        """Room for `nbytes` more on this output? Waits or drops by its policy (see inflight.py)."""
        out = self.outputs.get(output_id)
        if out is not None and out.live_bytes + nbytes <= out.limit.max_bytes:
            return out.limit.admit_room()  # room by the count (InFlightLimit.admit's first answer)
        with self.lock:
            out = self.output(output_id)
        return out.limit.admit(nbytes, lambda: out.live_bytes, self.collect)

    def publish(self, output_id: str, expected: int, nbytes: int, token: Any, per_process: int = 1) -> SlotRef:
        """`Ledger.publish` for a message of `output_id`, its bytes counted against the output's cap."""
        with self.lock:
            try:
                ref = self.ledger.publish(expected, nbytes, token, output_id, per_process)
            except LedgerError:  # every slot holds a message not collected yet: collect, then once more
                self.collect()
                ref = self.ledger.publish(expected, nbytes, token, output_id, per_process)
            out = self.output(output_id)
            out.live_bytes += nbytes
            out.peak_bytes = max(out.peak_bytes, out.live_bytes)
            out.sent += 1
            self.slot_output[ref.slot] = (output_id, nbytes)
            return ref

    def abandon(self, ref: SlotRef) -> None:
        """The message never left (its send failed): free its slot and memory now."""
        with self.lock:
            token = self.ledger.abandon(ref)
            if token is not None:
                self._forget(ref.slot)
        if token is not None:
            self._recycle_all([token])

    def collect_first(self, nbytes: int) -> bool:
        """Whether a send of `nbytes` that found no idle buffer collects before making one (see
        COLLECT_BATCH)."""
        return nbytes > BATCH_MAX_BYTES or self._ledger is None or len(self._ledger.live) >= COLLECT_BATCH

    def collect(self) -> int:
        """Free every finished slot's memory; -> how many."""
        with self.lock:
            if self._ledger is None:
                return 0
            finished = self._ledger.collect()
            for f in finished:
                self._forget(f.slot, f.unclaimed > 0)
        # After their slots are marked free (no receiver can claim them now), and outside the
        # lock: recycling may wait on the host for a retired buffer's last write.
        self._recycle_all([f.token for f in finished if f.token is not None])
        return len(finished)

    def _recycle_all(self, tokens: list) -> None:
        if not tokens:
            return
        try:
            self._recycle(*tokens)  # (the pool keeps each one whatever another's trouble)
        except Exception as e:
            log.warning("cuda-ipc: could not recycle message buffers: %s: %s", type(e).__name__, e)

    def _forget(self, slot: int, lost: bool = False) -> None:
        entry = self.slot_output.pop(slot, None)
        if entry is None:
            return
        out = self.outputs[entry[0]]
        out.live_bytes -= entry[1]
        out.lost += lost

    def stats(self) -> dict:
        with self.lock:
            return {
                output_id: {
                    "sent": out.sent,
                    "dropped": out.limit.dropped,
                    "lost_on_the_way": out.lost,
                    "waits": out.limit.waits,
                    "waited_s": round(out.limit.waited_s, 6),
                    "bytes_in_flight": out.live_bytes,
                    "peak_bytes_in_flight": out.peak_bytes,
                    "messages_in_flight": sum(1 for sent_on, _ in self.slot_output.values() if sent_on == output_id),
                    "max_bytes_in_flight": out.limit.max_bytes,
                }
                for output_id, out in self.outputs.items()
            }
