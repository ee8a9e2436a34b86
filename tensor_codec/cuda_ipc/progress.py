"""How far each receiver of one output got: the evidence that an unclaimed message was lost on
the way (dora 1.1 drops the oldest of a full input queue), not still waiting in a receiver's queue.
Time alone cannot tell the two apart (a receiver behind a backlog, or one whose first message
starts CUDA, claims late but claims); the order of its claims can: docs/wire-format.md, 5a, "Lifetime".
"""

from __future__ import annotations

from .identity import pid_alive

__all__ = ["OutputProgress", "MAX_RECEIVERS"]

MAX_RECEIVERS = 64  # receiving processes followed per output (the stalest is forgotten past it)


class OutputProgress:
    """What the ledger has shown of one output's receiving processes."""

    def __init__(self) -> None:
        # pid -> [latest order claimed >= 1, >= 2, ... times]: a node with two inputs wired to the
        # output claims twice (the ledger counts no process past its inputs on the output).
        self.reached: dict[int, list[int]] = {}
        self.last_claim_ns: dict[int, int] = {}

    def saw(self, order: int, claims: dict[int, int], claimed_ns: dict[int, int]) -> None:
        """Message `order` was claimed `claims[pid]` times by each pid (the latest at `claimed_ns`)."""
        for pid, times in claims.items():
            reached = self.reached.get(pid)
            if reached is None:
                if len(self.reached) >= MAX_RECEIVERS:  # the stalest goes
                    stalest = min(self.reached, key=lambda known: self.last_claim_ns.get(known, 0))
                    del self.reached[stalest]
                    self.last_claim_ns.pop(stalest, None)
                reached = self.reached[pid] = []
            for k in range(times):
                if k == len(reached):
                    reached.append(order)
                elif reached[k] < order:
                    reached[k] = order
            when = claimed_ns.get(pid, 0)
            if when > self.last_claim_ns.get(pid, 0):
                self.last_claim_ns[pid] = when

    def accounted(self, order: int, claims: dict[int, int], published_ns: int, now_ns: int, timeout_ns: int) -> int:
        """Expected receptions of message `order` accounted for: claimed, or passed by their
        receiver, or their receiver gone or no longer claiming."""
        total = sum(times for pid, times in claims.items() if pid not in self.reached)
        for pid, reached in self.reached.items():
            waited_since = max(self.last_claim_ns.get(pid, 0), published_ns)
            if now_ns - waited_since >= timeout_ns or not pid_alive(pid):
                passed = len(reached)
            else:
                passed = sum(1 for latest in reached if latest > order)
            total += max(claims.get(pid, 0), passed)
        return total

    def known(self) -> int:
        """Receptions per message of the receivers seen so far (their inputs wired to the output)."""
        return sum(len(reached) for reached in self.reached.values())
