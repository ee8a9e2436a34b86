"""A cap on the bytes one output has in flight by CUDA IPC, and what happens past it: the
settings of tc.ipc_configure, checked here alone (`max_bytes` is its max_bytes_in_flight). A
zero-copy producer keeps every message alive until its receivers are done, so without a cap a
slow or stuck receiver would grow the producer's GPU memory without bound. The policies ("wait",
"drop"): docs/transports.md, "CUDA IPC between processes of one machine".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..errors import InFlightLimitError, UsageError

__all__ = ["InFlightLimit", "POLICIES"]

POLICIES = ("wait", "drop")
log = logging.getLogger("tensor_codec")


class InFlightLimit:
    def __init__(
        self,
        max_bytes: int = 1 << 30,
        *,
        on_full: str = "wait",
        timeout_s: float = 5.0,
        name: str = "output",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if type(max_bytes) is not int or max_bytes <= 0:
            raise UsageError(f"max_bytes_in_flight: expected a positive number of bytes, got {max_bytes!r:.80}")
        if on_full not in POLICIES:
            raise UsageError(f"on_full: expected one of {', '.join(POLICIES)}, got {on_full!r:.80}")
        if type(timeout_s) not in (int, float) or not timeout_s >= 0:
            raise UsageError(f"timeout_s: expected >= 0 seconds, got {timeout_s!r:.80}")
        self.max_bytes = max_bytes
        self.on_full = on_full
        self.timeout_s = timeout_s
        self.name = name
        self.clock = clock
        self.sleep = sleep
        self.dropped = 0
        self.waits = 0
        self.waited_s = 0.0
        self._dropping = False  # inside a burst of drops (logged once)

    def admit_room(self) -> bool:
        """Admitted: there is room (a burst of drops, if any, is over)."""
        self._dropping = False
        return True

    def admit(self, nbytes: int, live_bytes: Callable[[], int], collect: Callable[[], object]) -> bool:
        """True: send it (room is there). False: dropped by policy. Raises on timeout."""
        if nbytes > self.max_bytes:
            raise InFlightLimitError(
                f"{self.name}: a message of {nbytes} bytes can never fit the cap of {self.max_bytes} bytes in "
                f"flight; raise the cap (max_bytes_in_flight)"
            )
        # `live_bytes` counts what has not been collected yet: room by that count needs no look
        # at the ledger; only past the cap are finished messages collected first.
        if live_bytes() + nbytes <= self.max_bytes:
            return self.admit_room()
        collect()
        if live_bytes() + nbytes <= self.max_bytes:
            self._dropping = False
            return True
        if self.on_full == "drop":
            self.dropped += 1
            if not self._dropping:
                log.warning(
                    "%s: %d bytes in flight, cap %d: dropping messages until receivers release some",
                    self.name,
                    live_bytes(),
                    self.max_bytes,
                )
            self._dropping = True
            return False
        start = self.clock()
        self.waits += 1
        pause = 0.0002
        while True:
            self.sleep(pause)
            pause = min(pause * 2, 0.005)
            collect()
            waited = self.clock() - start
            if live_bytes() + nbytes <= self.max_bytes:
                self.waited_s += waited
                return True
            if waited >= self.timeout_s:
                self.waited_s += waited
                raise InFlightLimitError(
                    f"{self.name}: {live_bytes()} bytes still in flight after waiting {waited:.2f} s, cap "
                    f"{self.max_bytes} bytes: receivers are slow or keep what they got (release it, "
                    f"tc.keep a copy, or raise max_bytes_in_flight / use on_full='drop')"
                )
