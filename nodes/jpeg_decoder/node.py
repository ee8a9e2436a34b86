"""The `tc-jpeg-decoder` node itself: settings, dora, the event loop (main.py answers --help before
any of this is imported)."""

from __future__ import annotations

import contextlib
import os
import sys
import time

import torch

import tensor_codec as tc

from ..common.startup import join_dataflow
from ..common.delivery import EMPTY, AckWindow, Outbox, Relay, ackers_of, is_timeout
from ..common.runtime import declared_inputs, declared_outputs, drain, finish_sharing, load_node_config, setup_logging
from .spec import SPEC
from .config import ACK_OUTPUT, INPUT, OUTPUT, load_config
from ..common.jpeg_engines import choose_decoder, start_engine
from .decoder import JpegDecoder
from .engines import make_decode_engine


def main() -> int:
    log = setup_logging("jpeg-decoder")
    loaded = load_node_config(log, load_config, os.environ)
    if loaded is None:
        return 2
    config, device = loaded
    node = join_dataflow(SPEC, log)
    if node is None:
        return 2
    started = start_engine(log, config.engine, device, lambda: choose_decoder(config.engine, device), lambda choice: make_decode_engine(choice, device))
    if started is None:
        return 2
    choice, engine = started
    decoder = JpegDecoder(engine, config.mode, config.max_pixels)
    # Acknowledged delivery (see ../common/delivery.py): `ack*` inputs from the frames' consumers
    # make the output windowed; an `ack` output acknowledges the JPEGs to their sender.
    ackers = ackers_of(declared_inputs(node))
    window = AckWindow(reliable=bool(ackers), window=config.window, retry_s=config.retry_s, give_up_s=config.ack_timeout_s, ackers=ackers)
    outbox = Outbox(window, lambda image, metadata: tc.send(node, OUTPUT, image, metadata), log, time.monotonic)
    send_ack = (lambda ack: node.send_output(ACK_OUTPUT, EMPTY, ack)) if ACK_OUTPUT in declared_outputs(node) else None
    relay = Relay({INPUT}, outbox, send_ack, log)
    acked = f", acknowledged by {', '.join(ackers)} (window {config.window})" if ackers else ""
    log.info("%s on %s, mode %s, batch %d%s", choice.describe(), device, config.mode, config.batch, acked)
    # The node's own stream: decoding is fenced and ordered on it, and sending reads from it.
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        ended = False  # the event stream ended
        while True:
            # Without acks: run until the event stream ends (dora delivers STOP before inputs
            # still queued). With acks: until the jpeg input closed and every frame sent is
            # acknowledged (the acks' own input closes only after this node ends).
            if outbox.reliable and (relay.gone or relay.finished(lambda: drain(node))):
                break
            if not relay.backlog or not relay.room():
                if ended:
                    break
                # Nothing to decode now: block for the next event (with frames unacknowledged,
                # no longer than the next resend is due).
                due = window.next_due(time.monotonic())
                event = node.next() if due is None else node.next(timeout=max(due, 0.005))
                if event is None:
                    ended = True
                elif not is_timeout(event):
                    relay.on_event(event)
                event = None
            # Then what is already queued: up to BATCH without acks (the rest waits in dora's
            # queue), everything with acks (they must get through; JPEGs wait in the relay's
            # backlog, which the sender's window bounds).
            while outbox.reliable or len(relay.backlog) < config.batch:
                event = node.try_recv()
                if event is None:
                    break
                relay.on_event(event)
                event = None
            batch = []
            for event in relay.take(min(config.batch, relay.room())):
                checked = decoder.check(event)
                if checked is not None:
                    batch.append(checked)
            event = None  # no reference to a message's buffer outlives the loop
            for image, metadata in decoder.decode(batch):
                try:
                    relay.send(image, metadata)
                except Exception as e:
                    decoder.send_failed(metadata, e)
            outbox.resend_due()
    status = relay.end_report()
    finish_sharing(log)  # decoded images sent by CUDA IPC live in this process's GPU memory
    delivered = f"; frames {outbox.summary()}" if outbox.reliable else ""
    log.info("%s%s", decoder.stats.summary(), delivered)
    return status


if __name__ == "__main__":
    sys.exit(main())
