"""The `tc-jpeg-encoder` node itself, on the node loop (../common/loop.py): frames taken while
the encoder (and, with acks, the output window) has room, encoded by the engine's workers, sent
in input order (main.py answers --help before any of this is imported)."""

from __future__ import annotations

import time

from tensor_codec.dora import Link

from ..common.delivery import Relay, ackers_of, relayed_output
from ..common.jpeg_engines import start_engine
from ..common.loop import CannotStart, NodeLogic, run
from .config import INPUT, OUTPUT, SPEC, load_config
from .encoder import JpegEncoder
from .engines import choose_encoder, make_engine

POLL_S = 0.002  # while batches are in flight: how long to wait for one before looking for input


def in_progress(encoder: JpegEncoder) -> int:
    """Frames taken and not yet sent: waiting for a batch or being encoded."""
    return encoder.held


def take(relay: Relay, encoder: JpegEncoder) -> bool:
    """Frames from the relay's backlog into the encoder, while the encoder and (with acks) the
    output window have room; -> True if a good frame was taken."""
    got = False
    while relay.backlog and encoder.can_accept and relay.room(in_progress(encoder)) > 0:
        for event in relay.take(1):
            got |= encoder.accept(event)
    return got


class JpegEncoderNode(NodeLogic):
    """Without acks: runs until the input is over (not on STOP: dora delivers STOP before inputs
    still queued), then finishes what is in flight. With acks: until the frames input closed and
    every JPEG is acknowledged (the acks' own inputs close only after this node ends, so the
    event stream would never end first)."""

    spec = SPEC
    load_config = staticmethod(load_config)
    encoder = None

    def start(self, link: Link) -> None:
        config, device = self.config, self.device
        started = start_engine(
            self.log,
            config.engine,
            device,
            lambda failed: choose_encoder(config.engine, config.subsampling, device, failed),
            lambda choice: make_engine(choice, device, config.quality, config.workers),
        )
        if started is None:
            raise CannotStart()  # start_engine said why
        choice, engine = started
        self.encoder = JpegEncoder(engine, config.quality, config.batch, refusals=self.refusals)
        # Acknowledged delivery (see ../common/delivery.py): `ack*` inputs from the JPEGs' consumers
        # make the output windowed; an `ack` output acknowledges the frames to their sender.
        ackers = ackers_of(link.declared_inputs())
        self.window, self.outbox, self.relay = relayed_output(
            link,
            ackers,
            INPUT,
            OUTPUT,
            link.output(OUTPUT).send_plain,  # the JPEG bytes as a plain dora message (encoding: jpeg)
            config,
            self.log,
            self.refusals,
        )
        self.got_input = False  # a good frame taken since the last collect
        self.over = False
        acked = f", acknowledged by {', '.join(ackers)} (window {config.window})" if ackers else ""
        self.log.info(
            "%s: %s, quality %d, batch %d, %d workers%s",
            choice.describe(),
            engine.describe(),
            config.quality,
            config.batch,
            config.workers,
            acked,
        )

    # Idle: block for the next event (with acks outstanding, no longer than the next resend is
    # due). Busy: take only what is already queued. Without acks, read no more than the encoder
    # has room for (the rest waits in dora's queue); with acks, everything queued, as the loop
    # reads it (MAX_EVENTS_PER_ROUND at a time: acks must get through), frames waiting in the
    # relay's backlog, which the sender's window bounds.
    def wait(self) -> float | None:
        if self.encoder.busy:
            return 0
        due = self.window.next_due(time.monotonic())
        return None if due is None else max(due, 0.005)

    def more_events(self) -> bool:
        return self.outbox.reliable or self.encoder.can_accept

    def on_input(self, event: dict) -> None:
        self.relay.on_input(event)
        self.got_input |= take(self.relay, self.encoder)

    def on_input_closed(self, input_id: str) -> None:
        self.relay.on_closed(input_id)

    def on_input_over(self) -> None:
        self.over = True

    def work(self) -> None:
        self.encoder.dispatch()
        for data, metadata in self.encoder.collect(0 if self.got_input and not self.over else POLL_S):
            try:
                self.relay.send(data, metadata)
            except Exception as e:  # one failed send is logged and counted
                self.encoder.send_failed(metadata, e)
        self.outbox.resend_due()
        self.got_input = take(self.relay, self.encoder)  # room opened by acks or by a batch done

    def finished(self) -> bool:
        return self.outbox.reliable and (bool(self.relay.gone) or self.relay.done(in_progress(self.encoder)))

    def busy(self) -> bool:
        return self.encoder.busy or bool(self.relay.backlog)

    def close(self) -> None:
        if self.encoder is not None:
            self.encoder.close()

    def finish(self) -> int:
        status = self.relay.end_report()
        delivered = f"; JPEGs {self.outbox.summary()}" if self.outbox.reliable else ""
        self.log.info("%s%s", self.encoder.stats.summary(), delivered)
        return status


def main() -> int:
    return run(JpegEncoderNode)
