"""The `tc-tensor-sender` node itself, on the node loop (../common/loop.py): numbered, checksummed
messages on every declared output, through an acknowledged window when `ack*` inputs are wired
(main.py answers --help before any of this is imported)."""

from __future__ import annotations

import time

import tensor_codec as tc

from ..common import protocol as P
from ..common.delivery import STOP_GRACE_S, ackers_of, malformed_ack, not_acknowledged_line, sized_window
from ..common.hostile import Refusals
from ..common.loop import EXIT_FAILED, EXIT_OK, NAP_S, NodeLogic, run
from ..common.runtime import Pacer, declared_inputs, declared_outputs
from ..common.settings import SettingError
from .config import OUTPUT, SPEC, load_config
from .delivery import Delivery
from .payloads import corrupted_messages, make_payloads
from .sender import TensorSender

MAX_FAILURES_IN_A_ROW = 30  # then sending itself is broken (no daemon, no room): stop
MAX_LOST_LINES = 20  # messages named one by one in the log at the end; the count covers the rest


def send(
    node,
    sender: TensorSender,
    delivery: Delivery,
    seq: int,
    log,
    transport: str = "auto",
    outputs=(OUTPUT,),
    first: bool = True,
) -> bool:
    """Send message `seq` on each output (each is routed on its own: see tensor_codec/routing.py);
    a message that cannot be sent is logged and counted lost (and, `first`: not a resend, counted
    as never sent).
    -> False once sends have failed MAX_FAILURES_IN_A_ROW times in a row."""
    outgoing = sender.message(seq)
    tx = delivery.tx_of(seq)
    if tx is not None:
        outgoing.metadata[P.TX] = tx  # this copy's transmission number, echoed in its acks
    outgoing.metadata[P.SENT_NS] = P.now_ns()
    try:
        for output in outputs:
            if outgoing.raw is not None:
                node.send_output(output, outgoing.raw, outgoing.metadata)
            else:
                tc.send(node, output, outgoing.obj, outgoing.metadata, transport=transport)
    except Exception as e:  # one payload that cannot be sent must not end the node
        log.error("message %d (%s) not sent: %s: %s", seq, outgoing.metadata.get(P.CASE), type(e).__name__, e)
        delivery.forget(seq)
        sender.failures_in_a_row += 1
        sender.not_sent += first
        return sender.failures_in_a_row < MAX_FAILURES_IN_A_ROW
    sender.failures_in_a_row = 0
    return True


class TensorSenderNode(NodeLogic):
    """Sends until every message is sent (and, with acks, acknowledged), sends keep failing, or
    dora says STOP: then, with acks, it gives the messages already sent STOP_GRACE_S to be
    acknowledged (receivers run their queues out after STOP), resending as usual. A receiver
    gone (its ack input closed) ends it at once."""

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
        self.broken = False  # sends kept failing

    def start(self, node) -> None:
        config = self.config
        self.node = node
        # Every declared output gets every message: wire local consumers to one output and remote
        # ones to another, and each gets its own transport.
        self.outputs = sorted(declared_outputs(node)) or [OUTPUT]
        self.may_share_gpu = self.device.type == "cuda" and config.transport != "host"
        if self.may_share_gpu:
            for output in self.outputs:
                tc.ipc_configure(output, max_bytes_in_flight=config.max_in_flight, on_full="wait")
        corrupted = corrupted_messages(config.seed) if config.corrupt else ()
        ackers = ackers_of(declared_inputs(node))
        self.sender = TensorSender(self.payloads, config.count, corrupted, wants_ack=bool(ackers))
        # WINDOW sized to the consumers' queues (refused, status 2, when it does not fit one).
        window = sized_window(node, config, ackers, self.outputs, self.log)
        self.delivery = Delivery(self.sender.total, reliable=bool(ackers), ackers=ackers, **window)
        acked = f", acknowledged by {', '.join(ackers)}" if ackers else ""
        self.log.info(
            "%s mode on %s: %s messages%s, transport %s",
            config.mode,
            self.device,
            self.sender.total or "endless",
            acked,
            config.transport,
        )

    def _send(self, seq: int, first: bool = True) -> bool:
        return send(self.node, self.sender, self.delivery, seq, self.log, self.config.transport, self.outputs, first)

    def wait(self) -> float | None:
        if self.linger_until is not None:
            return NAP_S
        if self.just_sent:
            return 0
        return max(min(self.pacer.wait_time(), NAP_S), 0.0005)  # waiting for the rate or for acks

    def on_input(self, event: dict) -> None:
        take_ack(event, self.sender, self.delivery, self.refusals)

    def on_input_closed(self, input_id: str) -> None:
        if ack_input_closed(input_id, self.delivery):
            self.log.error("%s closed: that receiver went away, nothing more can be acknowledged", input_id)
            self.gone.append(input_id)

    def on_stop(self) -> None:
        if self.linger_until is None:
            self.linger_until = time.monotonic() + STOP_GRACE_S

    def work(self) -> None:
        self.just_sent = False
        if self.gone or self.delivery.finished:
            return
        now = time.monotonic()
        healthy = all([self._send(seq, first=False) for seq in self.delivery.retransmissions(now)])
        if self.linger_until is not None:  # after STOP: resend, nothing new
            return
        if healthy and self.delivery.can_send_new() and self.pacer.wait_time() == 0:
            healthy = self._send(self.delivery.take_new(now))
            self.pacer.sent()
            self.just_sent = True
        if not healthy:
            self.log.error("stopping: %d sends in a row failed", self.sender.failures_in_a_row)
            self.broken = True

    def finished(self) -> bool:
        if self.gone or self.broken or self.delivery.finished:
            return True
        if self.linger_until is None:
            return False
        return not self.delivery.reliable or not self.delivery.unacked or time.monotonic() >= self.linger_until

    def finish(self) -> int:
        undelivered = end_report(self.delivery, self.log)
        ipc = ""
        shared = tc.ipc_stats()["outputs"] if self.may_share_gpu else {}
        for output in self.outputs:
            out = shared.get(output, {})
            if out.get("sent"):
                ipc += (
                    f", {output} by cuda-ipc: {out['sent']} sent, peak {out.get('peak_bytes_in_flight', 0)} bytes in "
                    f"flight, {out.get('waits', 0)} waits"
                )
        print(f"tensor sender: {summary_line(self.delivery, self.sender, undelivered)}{ipc}", flush=True)
        # With acks, a run that did not deliver everything fails (dora then reports the node failed).
        broken = self.sender.failures_in_a_row >= MAX_FAILURES_IN_A_ROW
        return EXIT_FAILED if broken or undelivered else EXIT_OK


def summary_line(delivery: Delivery, sender: TensorSender, undelivered: int) -> str:
    """What the sender did, each message counted once: sent (and could not be sent); with acks,
    acknowledged and not acknowledged (`undelivered`: end_report's figure, whatever the reason)."""
    d = delivery
    parts = [f"{d.next_seq - sender.not_sent} messages sent"]
    if sender.not_sent:
        parts.append(f"{sender.not_sent} could not be sent")
    if d.reliable:
        parts += [f"{d.delivered} acknowledged", f"{undelivered} not acknowledged", f"{d.retransmits} retransmitted"]
        if d.held:
            parts.append(f"{d.held} held for room in a consumer's queue")
        if d.probes:
            parts.append(f"{d.probes} probes of a silent consumer")
        if d.stray_acks:
            parts.append(f"{d.stray_acks} acks of nothing in flight")
    return ", ".join(parts)


def take_ack(event: dict, sender: TensorSender, delivery: Delivery, refusals: Refusals | None = None) -> None:
    """An INPUT event on an ack input: applied when it acknowledges a message of this run's
    stream; counted (`stray_acks`) when it names nothing in flight; refused (counted, logged
    rate-limited) when malformed. Anything else is not the sender's."""
    if event["id"] not in delivery.ackers:
        return
    metadata = event.get("metadata") or {}
    why = malformed_ack(metadata)
    if why is not None:
        if refusals is not None:
            refusals.refuse(f"{event['id']}: malformed ack", why)
        return
    if metadata.get(P.STREAM, "") != sender.stream:
        delivery.stray_acks += 1
        return
    delivery.ack(metadata[P.SEQ], event["id"], metadata.get(P.TX))


def ack_input_closed(input_id: str, delivery: Delivery) -> bool:
    """-> True when that input's closing ends the sender: one of its ack inputs, with acks
    (that receiver is gone, so nothing would ever be fully acknowledged)."""
    return input_id in delivery.ackers and delivery.reliable


def end_report(delivery: Delivery, log) -> int:
    """Log every message not delivered; -> how many (with acks: not acknowledged, whatever
    the reason: given up, still unacknowledged when the node stopped, or never sent)."""
    for seq in sorted(delivery.lost)[:MAX_LOST_LINES]:
        log.error("message %d was lost (not sent, or never acknowledged)", seq)
    if len(delivery.lost) > MAX_LOST_LINES:
        log.error("... and %d more lost", len(delivery.lost) - MAX_LOST_LINES)
    if not delivery.reliable:
        return 0
    undelivered = delivery.undelivered()
    if undelivered:
        total = delivery.total or delivery.next_seq
        log.error("%s", not_acknowledged_line(len(undelivered), total, "messages", f"seq {undelivered[0]}"))
    return len(undelivered)


def main() -> int:
    return run(TensorSenderNode)
