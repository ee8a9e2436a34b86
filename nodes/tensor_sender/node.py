"""The `tc-tensor-sender` node itself, on the node loop (../common/loop.py): numbered, checksummed
messages on every declared output, through an acknowledged window when `ack*` inputs are wired
(main.py answers --help before any of this is imported)."""

from __future__ import annotations

import time

import tensor_codec as tc
from tensor_codec.dora import Link

from ..common import protocol as P
from ..common.delivery import STOP_GRACE_S, AckWindow, Outbox, ackers_of, sized_window, window_figures
from ..common.loop import EXIT_FAILED, EXIT_OK, NAP_S, NodeLogic, run
from ..common.runtime import Pacer
from ..common.settings import SettingError
from .config import OUTPUT, SPEC, load_config
from .payloads import corrupted_messages, make_payloads
from .sender import TensorSender

MAX_FAILURES_IN_A_ROW = 30  # then sending itself is broken (no daemon, no room): stop
MAX_LOST_LINES = 20  # messages named one by one in the log at the end; the count covers the rest


def transmit(
    link: Link, sender: TensorSender, seq: int, window_metadata: dict, transport: str = "auto", outputs=(OUTPUT,)
):
    """Send message `seq`, rebuilt from its seq, on each of the node's `outputs` (each its own
    `link.output`, routed on its own: see tensor_codec/routing.py), with what the window numbered
    it (`tx`, `sent_ns`). Raises what dora raised (the outbox counts the message lost, or resends
    it later); counts the sends that failed in a row (`sender.failures_in_a_row`)."""
    outgoing = sender.message(seq)
    for key in (P.TX, P.SENT_NS):
        if key in window_metadata:
            outgoing.metadata[key] = window_metadata[key]
    try:
        for output in outputs:
            if outgoing.raw is not None:  # a corrupted message's bytes, past the codec
                link.node.send_output(output, outgoing.raw, outgoing.metadata)
            else:
                link.output(output).send(outgoing.obj, outgoing.metadata, transport=transport)
    except Exception:
        sender.failures_in_a_row += 1
        raise
    sender.failures_in_a_row = 0


class TensorSenderNode(NodeLogic):
    """Sends until every message is sent (and, with acks, acknowledged or given up), sends keep
    failing, or dora says STOP: then, with acks, it gives the messages already sent STOP_GRACE_S
    to be acknowledged (receivers run their queues out after STOP), resending as usual. A
    receiver gone (its ack input closed) ends it at once."""

    spec = SPEC
    load_config = staticmethod(load_config)
    SENDS_WITH_TC = True  # payloads sent by CUDA IPC live in this process's GPU memory

    def __init__(self, config, device, log):
        super().__init__(config, device, log)
        if config.transport == "cuda-ipc" and device.type != "cuda":
            raise SettingError(f"TRANSPORT: cuda-ipc shares GPU memory, expected DEVICE on a GPU, got {device}")
        self.payloads = make_payloads(config, device)
        self.pacer = Pacer(config.rate)
        self.just_sent = True  # the first round takes only what is queued
        self.linger_until: float | None = None  # after STOP
        self.gone: list[str] = []  # ack inputs that closed
        self.next_seq = 0  # the next message to make
        self.opened = False  # an ack opened the full window this round (more_events)

    def start(self, link: Link) -> None:
        config = self.config
        # Every declared output gets every message: wire local consumers to one output and remote
        # ones to another, and each gets its own transport.
        self.outputs = sorted(link.declared_outputs()) or [OUTPUT]
        self.may_share_gpu = self.device.type == "cuda" and config.transport != "host"
        if self.may_share_gpu:
            for output in self.outputs:
                tc.ipc_configure(output, max_bytes_in_flight=config.max_in_flight, on_full="wait")
        corrupted = corrupted_messages(config.seed) if config.corrupt else ()
        ackers = ackers_of(link.declared_inputs())
        self.sender = TensorSender(self.payloads, config.count, corrupted, wants_ack=bool(ackers))
        # WINDOW sized to the consumers' queues (refused, status 2, when it does not fit one).
        sized = sized_window(link, config, ackers, self.outputs, self.log)
        window = AckWindow(reliable=bool(ackers), ackers=ackers, **sized)
        self.outbox = Outbox(
            window,
            lambda seq, metadata: transmit(link, self.sender, seq, metadata, config.transport, self.outputs),
            self.log,
            time.monotonic,
            self.refusals,
        )
        acked = f", acknowledged by {', '.join(ackers)}" if ackers else ""
        self.log.info(
            "%s mode on %s: %s messages%s, transport %s",
            config.mode,
            self.device,
            self.sender.total or "endless",
            acked,
            config.transport,
        )

    @property
    def all_taken(self) -> bool:
        return bool(self.sender.total) and self.next_seq >= self.sender.total

    @property
    def broken(self) -> bool:
        return self.sender.failures_in_a_row >= MAX_FAILURES_IN_A_ROW

    def wait(self) -> float | None:
        if self.linger_until is not None:
            return NAP_S
        if self.just_sent or self._may_send_new():
            return 0
        if self.outbox.room() and not self.all_taken:
            return max(min(self.pacer.wait_time(), NAP_S), 0.0005)  # paced: nap until the next is due
        # Waiting for acks: block until one comes (it wakes the loop at once), at most until the
        # next resend, probe or give-up is due. A nap here would leave each ack waiting for it.
        due = self.outbox.next_due()
        return NAP_S if due is None else max(due, 0.0005)

    def more_events(self) -> bool:
        # A round's reading ends at an ack that opened the full window: the next message goes before
        # more acks are read, so a flood on one ack input delays no message behind it.
        return not self.opened

    def on_input(self, event: dict) -> None:
        full = not self.outbox.room()
        self.outbox.on_ack(event)
        self.opened |= full and self.outbox.room() > 0

    def on_input_closed(self, input_id: str) -> None:
        if input_id in self.outbox.window.ackers and self.outbox.reliable:
            self.log.error("%s closed: that receiver went away, nothing more can be acknowledged", input_id)
            self.gone.append(input_id)

    def on_stop(self) -> None:
        if self.linger_until is None:
            self.linger_until = time.monotonic() + STOP_GRACE_S

    def _may_send_new(self) -> bool:
        return (
            self.linger_until is None
            and not self.gone
            and not self.broken
            and not self.all_taken
            and self.outbox.room() > 0
            and self.pacer.wait_time() == 0
        )

    def work(self) -> None:
        self.just_sent = self.opened = False
        if self.gone:
            return
        self.outbox.resend_due()  # resends, messages held for room in a queue, probes, give-ups
        for _ in range(self.config.window):  # what the window has room for, not past the rate
            if not self._may_send_new():
                break
            seq = self.next_seq
            self.next_seq += 1
            try:
                self.outbox.send(seq, {P.STREAM: self.sender.stream, P.SEQ: seq})
            except Exception as e:  # one payload that cannot be sent must not end the node
                case = self.sender.message(seq).metadata.get(P.CASE)
                self.log.error("message %d (%s) not sent: %s: %s", seq, case, type(e).__name__, e)
            self.pacer.sent()
            self.just_sent = True
        if self.broken:
            self.log.error("stopping: %d sends in a row failed", self.sender.failures_in_a_row)

    def finished(self) -> bool:
        if self.gone or self.broken or (self.all_taken and not self.outbox.outstanding):
            return True
        if self.linger_until is None:
            return False
        return not self.outbox.outstanding or time.monotonic() >= self.linger_until

    def finish(self) -> int:
        undelivered = lost_report(self.outbox, self.sender.total, self.log)
        ipc = ""
        shared = tc.ipc_stats()["outputs"] if self.may_share_gpu else {}
        for output in self.outputs:
            out = shared.get(output, {})
            if out.get("sent"):
                ipc += (
                    f", {output} by cuda-ipc: {out['sent']} sent, peak {out.get('peak_bytes_in_flight', 0)} bytes in "
                    f"flight, {out.get('waits', 0)} waits"
                )
        print(f"tensor sender: {summary_line(self.outbox, undelivered)}{ipc}", flush=True)
        # With acks, a run that did not deliver everything fails (dora then reports the node failed).
        return EXIT_FAILED if self.broken or undelivered else EXIT_OK


def summary_line(outbox: Outbox, undelivered: int) -> str:
    """What the sender did, each message counted once: sent (and could not be sent); with acks,
    acknowledged and not acknowledged (`undelivered`: lost_report's figure, whatever the reason)."""
    parts = [f"{outbox.sent} messages sent"]
    if outbox.failed:
        parts.append(f"{outbox.failed} could not be sent")
    if not outbox.reliable:
        return ", ".join(parts)
    w = outbox.window
    parts += [f"{w.delivered} acknowledged", f"{undelivered} not acknowledged", f"{w.retransmits} retransmitted"]
    return ", ".join(parts) + window_figures(w)


def lost_report(outbox: Outbox, total: int, log) -> int:
    """Log every message not delivered (the first MAX_LOST_LINES by seq, then how many more, and
    the outbox's line); -> how many (with acks: not acknowledged, whatever the reason: given up,
    still unacknowledged when the node stopped, never sent or never made). Without acks: 0."""
    if not outbox.reliable:
        return 0
    keys, unmade = outbox.undelivered(planned=total)
    seqs = sorted(seq for _, seq in keys)
    for seq in seqs[:MAX_LOST_LINES]:
        log.error("message %d was lost (not sent, or never acknowledged)", seq)
    if len(seqs) > MAX_LOST_LINES:
        log.error("... and %d more lost", len(seqs) - MAX_LOST_LINES)
    outbox.end_report("messages", planned=total)
    return len(seqs) + unmade


def main() -> int:
    return run(TensorSenderNode)
