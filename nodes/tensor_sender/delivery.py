"""Which sequence numbers to send when: a window of unacknowledged messages, retransmission
and giving up. No dora here, so it is tested with a fake clock.

dora 1.1 can drop messages on its direct data plane when a consumer lags (publisher congestion
control and the consumer's input queue; dora-rs/dora#3397). A sender whose dataflow wires an
`ack` input (the receiver's `ack` output) is reliable: at most `window` messages are in flight,
one unacknowledged for `retry_s` is sent again (the receiver counts and skips the duplicate),
and one unacknowledged for `give_up_s` is given up and reported lost. Without acks every
message is sent once.

Several receivers (say one on this machine and one on another) each wire their `ack` output to
an input of the sender whose id starts with `ack` (`ack`, `ack_remote`, ...): a message is
delivered once every one of them acknowledged it, and a retransmission (which every receiver
gets; dora outputs are broadcast) is skipped as a duplicate by those that had it.
"""

from __future__ import annotations


class Delivery:
    def __init__(self, total: int, *, reliable: bool, window: int = 8, retry_s: float = 1.0, give_up_s: float = 30.0, ackers=("ack",)):
        self.total = total  # 0 = endless
        self.reliable = reliable
        self.ackers = frozenset(ackers)  # the inputs that must each acknowledge a message
        self.waiting_for: dict[int, set[str]] = {}  # seq -> ackers that have not acknowledged it
        self.window = window
        self.retry_s = retry_s
        self.give_up_s = give_up_s
        self.next_seq = 0
        self.unacked: dict[int, list[float]] = {}  # seq -> [first send, last send]
        self.retransmits = 0
        self.lost: list[int] = []

    @property
    def all_taken(self) -> bool:
        return bool(self.total) and self.next_seq >= self.total

    @property
    def finished(self) -> bool:
        return self.all_taken and not self.unacked

    def can_send_new(self) -> bool:
        if self.all_taken:
            return False
        return not self.reliable or len(self.unacked) < self.window

    def take_new(self, now: float) -> int:
        seq = self.next_seq
        self.next_seq += 1
        if self.reliable:
            self.unacked[seq] = [now, now]
            self.waiting_for[seq] = set(self.ackers)
        return seq

    def retransmissions(self, now: float) -> list[int]:
        """Messages to send again now; those past `give_up_s` move to `lost` instead."""
        due = []
        for seq, times in list(self.unacked.items()):
            first, last = times
            if now - first >= self.give_up_s:
                del self.unacked[seq]
                self.waiting_for.pop(seq, None)
                self.lost.append(seq)
            elif now - last >= self.retry_s:
                times[1] = now
                due.append(seq)
        self.retransmits += len(due)
        return due

    def ack(self, seq: int, acker: str = "ack") -> None:
        waiting = self.waiting_for.get(seq)
        if waiting is None:
            return  # unknown, or already delivered: a late duplicate
        waiting.discard(acker)
        if not waiting:
            del self.waiting_for[seq]
            self.unacked.pop(seq, None)

    def forget(self, seq: int) -> None:
        """A message that could not be sent at all: count it lost, stop waiting for it."""
        self.waiting_for.pop(seq, None)
        if self.unacked.pop(seq, None) is not None or not self.reliable:
            self.lost.append(seq)
