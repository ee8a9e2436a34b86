"""The `tc-tensor-sender` node itself: settings, dora, the event loop (main.py answers --help before
any of this is imported)."""

from __future__ import annotations

import os
import sys
import time

import tensor_codec as tc

from ..common.startup import join_dataflow
from ..common import protocol as P
from ..common.delivery import STOP_GRACE_S, ackers_of, not_acknowledged_line
from ..common.device import resolve_device
from ..common.runtime import declared_inputs, declared_outputs, drain, Pacer, setup_logging
from ..common.settings import SettingError
from .spec import SPEC
from .config import OUTPUT, load_config
from .delivery import Delivery
from .payloads import corrupted_messages, make_payloads
from .sender import TensorSender


MAX_FAILURES_IN_A_ROW = 30  # then sending itself is broken (no daemon, no room): stop
MAX_LOST_LINES = 20  # messages named one by one in the log at the end; the count covers the rest


def send(node, sender: TensorSender, delivery: Delivery, seq: int, log, transport: str = "auto", outputs=(OUTPUT,)) -> bool:
    """Send message `seq` on each output (each is routed on its own: see tensor_codec/routing.py);
    a message that cannot be sent is logged and counted lost.
    -> False once sends have failed MAX_FAILURES_IN_A_ROW times in a row."""
    outgoing = sender.message(seq)
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
        return sender.failures_in_a_row < MAX_FAILURES_IN_A_ROW
    sender.failures_in_a_row = 0
    return True


def handle_events(events: list[dict], sender: TensorSender, delivery: Delivery) -> bool:
    """Apply acks; -> True when the node should stop: dora asked it to, or an `ack` input
    closed (that receiver is gone, so nothing would ever be fully acknowledged)."""
    stop = False
    for event in events:
        if event["type"] == "STOP":
            stop = True
        elif ack_input_closed(event, delivery):
            stop = True
        elif event["type"] == "INPUT" and event["id"] in delivery.ackers:
            metadata = event.get("metadata") or {}
            seq = metadata.get(P.SEQ)
            if metadata.get(P.STREAM) == sender.stream and type(seq) is int:
                delivery.ack(seq, event["id"])
    return stop


def ack_input_closed(event: dict, delivery: Delivery) -> bool:
    return event["type"] == "INPUT_CLOSED" and event.get("id") in delivery.ackers and delivery.reliable


def linger(node, sender: TensorSender, delivery: Delivery, log, transport: str, outputs, grace_s: float = STOP_GRACE_S) -> None:
    """After STOP: send nothing new, but give the messages already sent `grace_s` to be
    acknowledged (receivers run their queues out after STOP), resending as usual."""
    deadline = time.monotonic() + grace_s
    while delivery.unacked and time.monotonic() < deadline:
        events = drain(node)
        handle_events(events, sender, delivery)
        if any(ack_input_closed(e, delivery) for e in events):
            return
        for seq in delivery.retransmissions(time.monotonic()):
            send(node, sender, delivery, seq, log, transport, outputs)
        time.sleep(0.002)


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
    log = setup_logging("tensor-sender")
    try:
        config = load_config(os.environ)
        device = resolve_device(config.device)
        if config.transport == "cuda-ipc" and device.type != "cuda":
            raise SettingError(f"TRANSPORT: cuda-ipc shares GPU memory, expected DEVICE on a GPU, got {device}")
        payloads = make_payloads(config, device)
    except SettingError as e:
        log.error("%s", e)
        return 2
    node = join_dataflow(SPEC, log)
    if node is None:
        return 2
    # Every declared output gets every message: wire local consumers to one output and remote
    # ones to another, and each gets its own transport.
    outputs = sorted(declared_outputs(node)) or [OUTPUT]
    may_share_gpu = device.type == "cuda" and config.transport != "host"
    if may_share_gpu:
        for output in outputs:
            tc.ipc_configure(output, max_bytes_in_flight=config.max_in_flight, on_full="wait")
    corrupted = corrupted_messages(config.seed) if config.corrupt else ()
    ackers = ackers_of(declared_inputs(node))
    reliable = bool(ackers)
    sender = TensorSender(payloads, config.count, corrupted, wants_ack=reliable)
    delivery = Delivery(
        sender.total, reliable=reliable, window=config.window, retry_s=config.retry_s, give_up_s=config.ack_timeout_s, ackers=ackers
    )
    pacer = Pacer(config.rate)
    acked = f", acknowledged by {', '.join(ackers)}" if reliable else ""
    log.info("%s mode on %s: %s messages%s, transport %s", config.mode, device, sender.total or "endless", acked, config.transport)
    while True:
        events = drain(node)
        if handle_events(events, sender, delivery):
            closed = [e["id"] for e in events if ack_input_closed(e, delivery)]
            if closed:
                log.error("%s closed: that receiver went away, nothing more can be acknowledged", ", ".join(closed))
                handle_events(drain(node), sender, delivery)  # acks queued behind INPUT_CLOSED (dora hands it out first)
            elif delivery.reliable:
                linger(node, sender, delivery, log, config.transport, outputs)
            break
        if delivery.finished:
            break
        now = time.monotonic()
        healthy = all([send(node, sender, delivery, seq, log, config.transport, outputs) for seq in delivery.retransmissions(now)])
        sent_new = healthy and delivery.can_send_new() and pacer.wait_time() == 0
        if sent_new:
            healthy = send(node, sender, delivery, delivery.take_new(now), log, config.transport, outputs)
            pacer.sent()
        if not healthy:
            log.error("stopping: %d sends in a row failed", sender.failures_in_a_row)
            break
        if not sent_new:
            time.sleep(max(min(pacer.wait_time(), 0.002), 0.0005))  # waiting for the rate or for acks
    undelivered = end_report(delivery, log)
    ipc = ""
    shared = tc.ipc_stats()["outputs"] if may_share_gpu else {}
    if any(shared.get(output, {}).get("sent") for output in outputs):
        # Our GPU memory dies with this process: stay until receivers are done with it.
        if not tc.ipc_flush(10.0):
            log.warning("exiting with CUDA IPC messages still held by receivers; they will get errors")
        shared = tc.ipc_stats()["outputs"]
        for output in outputs:
            out = shared.get(output, {})
            if out.get("sent"):
                ipc += f", {output} by cuda-ipc: {out['sent']} sent, peak {out.get('peak_bytes_in_flight', 0)} bytes in flight, {out.get('waits', 0)} waits"
    print(
        f"tensor sender: {delivery.next_seq} messages sent, {delivery.retransmits} retransmitted, "
        f"{len(delivery.lost)} lost{ipc}",
        flush=True,
    )
    # With acks, a run that did not deliver everything fails (dora then reports the node failed).
    return 1 if sender.failures_in_a_row >= MAX_FAILURES_IN_A_ROW or undelivered else 0


if __name__ == "__main__":
    sys.exit(main())
