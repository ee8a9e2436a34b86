"""The `tc-jpeg-decoder` node itself, on the node loop (../common/loop.py): JPEGs checked as they
are taken, decoded up to BATCH at a time by WORKERS threads (decoder.py), and sent as frames through
tensor_codec from the node's own stream, in input order (main.py answers --help before any of this
is imported)."""

from __future__ import annotations

import contextlib
import time

import torch

from tensor_codec.dora import Link, Output

from ..common.delivery import ackers_of, relayed_output
from ..common.jpeg_engines import choose_decoder, start_engine
from ..common.loop import CannotStart, NodeLogic, run
from .config import INPUT, OUTPUT, SPEC, load_config
from .decoder import JpegDecoder
from .engines import make_decode_engine

POLL_S = 0.002  # while batches are being decoded: how long to wait for one before looking for input


def frame_bound(output: Output, device: torch.device) -> int | None:
    """The most bytes a decoded frame may take: what `output` can carry (its max_send_bytes), so
    a frame that could never be sent is refused before it is decoded (issue 31); None where frames
    go by CUDA IPC, whose message carries a handle while the frame stays in this process's GPU
    memory (MAX_PIXELS bounds it there)."""
    if device.type == "cuda" and _transport(output, device) == "cuda-ipc":
        return None
    return output.max_send_bytes()


def _transport(output: Output, device: torch.device) -> str:
    """The transport `output.send` picks for a frame on `device` (the consumers' placement decides)."""
    return output.transport_for(torch.empty(0, dtype=torch.uint8, device=device))[0]


def take(relay, decoder: JpegDecoder) -> bool:
    """JPEGs from the relay's backlog into the decoder (checked on the way), while the decoder and
    (with acks) the output window have room; -> True if a good JPEG was taken."""
    got = False
    while relay.backlog and decoder.can_accept and relay.room(decoder.held) > 0:
        for event in relay.take(1):
            got |= decoder.accept(event)
    return got


class JpegDecoderNode(NodeLogic):
    """Without acks: runs until the input is over (dora delivers STOP before inputs still queued)
    and the JPEGs taken are decoded and sent. With acks: until the jpeg input closed and every
    frame sent is acknowledged (the acks' own input closes only after this node ends)."""

    spec = SPEC
    load_config = staticmethod(load_config)
    SENDS_WITH_TC = True  # decoded images sent by CUDA IPC live in this process's GPU memory
    decoder = None

    def start(self, link: Link) -> None:
        config, device = self.config, self.device
        output = link.output(OUTPUT)
        started = start_engine(
            self.log,
            config.engine,
            device,
            lambda failed: choose_decoder(config.engine, device, failed),
            lambda choice: make_decode_engine(choice, device),
        )
        if started is None:
            raise CannotStart()  # start_engine said why
        choice, engine = started
        self.decoder = JpegDecoder(
            engine,
            config.mode,
            config.max_pixels,
            max_scans=config.max_scans,
            max_segments=config.max_segments,
            max_scan_pixels=config.max_scan_pixels,
            max_frame_bytes=frame_bound(output, device),
            refusals=self.refusals,
            batch=config.batch,
            workers=config.workers,
        )
        # Acknowledged delivery (see ../common/delivery.py): `ack*` inputs from the frames' consumers
        # make the output windowed; an `ack` output acknowledges the JPEGs to their sender.
        ackers = ackers_of(link.declared_inputs())
        self.window, self.outbox, self.relay = relayed_output(
            link,
            ackers,
            INPUT,
            OUTPUT,
            output.send,
            config,
            self.log,
            self.refusals,
        )
        # The node's own stream: decoded frames are handed to it (decoder.py) and sent from it.
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.got_input = False  # a good JPEG taken since the last collect
        self.over = False
        acked = f", acknowledged by {', '.join(ackers)} (window {config.window})" if ackers else ""
        self.log.info(
            "%s: %s, mode %s, batch %d, %d workers%s",
            choice.describe(),
            engine.describe(),
            config.mode,
            config.batch,
            config.workers,
            acked,
        )
        self.log.info("%s", self.decoder.limits())

    # Idle: block for the next event (with frames unacknowledged, no longer than the next resend
    # is due). Busy: take only what is already queued. Without acks, read no more than the
    # decoder has room for (the rest waits in dora's queue); with acks, everything queued, as the
    # loop reads it (MAX_EVENTS_PER_ROUND at a time: acks must get through; JPEGs wait in the
    # relay's backlog, which the sender's window bounds).
    def wait(self) -> float | None:
        if self.decoder.busy:
            return 0
        due = self.window.next_due(time.monotonic())
        return None if due is None else max(due, 0.005)

    def more_events(self) -> bool:
        return self.outbox.reliable or self.decoder.can_accept

    def on_input(self, event: dict) -> None:
        self.relay.on_input(event)
        self.got_input |= take(self.relay, self.decoder)

    def on_input_closed(self, input_id: str) -> None:
        self.relay.on_closed(input_id)

    def on_input_over(self) -> None:
        self.over = True

    def work(self) -> None:
        with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            self.decoder.dispatch()
            for image, metadata in self.decoder.collect(0 if self.got_input and not self.over else POLL_S):
                try:
                    self.relay.send(image, metadata)
                except Exception as e:
                    self.decoder.send_failed(metadata, e)
            self.outbox.resend_due()
        self.got_input = take(self.relay, self.decoder)  # room opened by acks or by a batch done

    def finished(self) -> bool:
        return self.outbox.reliable and (bool(self.relay.gone) or self.relay.done(self.decoder.held))

    def busy(self) -> bool:
        return self.decoder.busy or bool(self.relay.backlog)

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.close()

    def finish(self) -> int:
        status = self.relay.end_report()
        delivered = f"; frames {self.outbox.summary()}" if self.outbox.reliable else ""
        self.log.info("%s%s", self.decoder.stats.summary(), delivered)
        return status


def main() -> int:
    return run(JpegDecoderNode)
