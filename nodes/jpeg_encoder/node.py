"""The `tc-jpeg-encoder` node itself: settings, dora, the event loop (main.py answers --help before
any of this is imported)."""

from __future__ import annotations

import os
import sys
import time

import tensor_codec as tc

from ..common.startup import join_dataflow
from ..common.delivery import EMPTY, AckWindow, Outbox, Relay, ackers_of, is_timeout
from ..common.runtime import declared_inputs, declared_outputs, drain, load_node_config, setup_logging
from .spec import SPEC
from .config import ACK_OUTPUT, INPUT, OUTPUT, load_config
from .encoder import JpegEncoder
from ..common.jpeg_engines import start_engine
from .engines import choose_encoder, make_engine

POLL_S = 0.002  # while batches are in flight: how long to wait for one before looking for input


def in_progress(encoder: JpegEncoder) -> int:
    """Frames taken and not yet sent: waiting for a batch or being encoded."""
    return len(encoder.pending) + sum(len(job.items) for job in encoder.inflight)


def take(relay: Relay, encoder: JpegEncoder) -> bool:
    """Frames from the relay's backlog into the encoder, while the encoder and (with acks) the
    output window have room; -> True if a good frame was taken."""
    got = False
    while relay.backlog and encoder.can_accept and relay.room(in_progress(encoder)) > 0:
        for event in relay.take(1):
            got |= encoder.accept(event)
    return got


def main() -> int:
    log = setup_logging("jpeg-encoder")
    loaded = load_node_config(log, load_config, os.environ)
    if loaded is None:
        return 2
    config, device = loaded
    node = join_dataflow(SPEC, log)
    if node is None:
        return 2
    started = start_engine(log, config.engine, device, lambda: choose_encoder(config.engine, config.subsampling, device),
                           lambda choice: make_engine(choice, device, config.quality, config.workers))
    if started is None:
        return 2
    choice, engine = started
    encoder = JpegEncoder(engine, config.quality, config.batch)
    # Acknowledged delivery (see ../common/delivery.py): `ack*` inputs from the JPEGs' consumers
    # make the output windowed; an `ack` output acknowledges the frames to their sender.
    ackers = ackers_of(declared_inputs(node))
    window = AckWindow(reliable=bool(ackers), window=config.window, retry_s=config.retry_s, give_up_s=config.ack_timeout_s, ackers=ackers)
    outbox = Outbox(window, lambda data, metadata: tc.send_plain(node, OUTPUT, data, metadata), log, time.monotonic)
    send_ack = (lambda ack: node.send_output(ACK_OUTPUT, EMPTY, ack)) if ACK_OUTPUT in declared_outputs(node) else None
    relay = Relay({INPUT}, outbox, send_ack, log)
    acked = f", acknowledged by {', '.join(ackers)} (window {config.window})" if ackers else ""
    log.info("%s: %s, quality %d, batch %d, %d workers%s", choice.describe(), engine.describe(), config.quality, config.batch, config.workers, acked)
    ended = False  # the event stream ended
    try:
        # Without acks: run until the event stream ends (not on STOP: dora delivers STOP before
        # inputs still queued), then finish what is in flight. With acks: until the frames input
        # closed and every JPEG is acknowledged (the acks' own inputs close only after this node
        # ends, so the event stream would never end first).
        while True:
            got_input = take(relay, encoder)
            # Idle: block for the next event (with acks outstanding, no longer than the next
            # resend is due). Busy: take only what is already queued. Without acks, read no more
            # than the encoder has room for (the rest waits in dora's queue); with acks, read
            # everything (acks must get through), frames waiting in the relay's backlog, which
            # the sender's window bounds.
            while not ended and (outbox.reliable or encoder.can_accept):
                if encoder.busy:
                    event = node.try_recv()
                    if event is None:
                        break  # try_recv's None only means "nothing queued"
                else:
                    if outbox.reliable:
                        if relay.gone or relay.finished(lambda: drain(node)):
                            break
                        got_input |= take(relay, encoder)  # finished() may have found frames
                        if encoder.busy:
                            continue
                    due = window.next_due(time.monotonic())
                    event = node.next() if due is None else node.next(timeout=max(due, 0.005))
                    if event is None:
                        ended = True
                        break
                    if is_timeout(event):
                        break
                relay.on_event(event)
                del event
                got_input |= take(relay, encoder)
            encoder.dispatch()
            for data, metadata in encoder.collect(0 if got_input and not ended else POLL_S):
                try:
                    relay.send(data, metadata)
                except Exception as e:  # one failed send is logged and counted
                    encoder.send_failed(metadata, e)
            outbox.resend_due()
            if relay.gone and outbox.reliable:
                break
            if outbox.reliable and relay.finished(lambda: drain(node), in_progress(encoder)):
                break
            if ended and not encoder.busy and not relay.backlog:
                break
    finally:
        encoder.close()
    status = relay.end_report()
    delivered = f"; JPEGs {outbox.summary()}" if outbox.reliable else ""
    log.info("%s%s", encoder.stats.summary(), delivered)
    return status


if __name__ == "__main__":
    sys.exit(main())
