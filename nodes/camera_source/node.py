"""The `tc-camera-source` node itself, on the node loop (../common/loop.py): frames at FPS or one
per tick, through an acknowledged window when `ack*` inputs are wired (main.py answers --help
before any of this is imported)."""

from __future__ import annotations

import time

from tensor_codec.dora import Link, Output

from ..common import protocol as P
from ..common.delivery import STOP_GRACE_S, AckWindow, Outbox, ackers_of, sized_window
from ..common.loop import EXIT_FAILED, EXIT_OK, NAP_S, CannotStart, NodeLogic, run
from ..common.runtime import Pacer
from .camera import Camera
from .config import OUTPUT, SPEC, TICK_INPUT, load_config
from .sources import SourceError, open_source

MAX_FAILURES_IN_A_ROW = 30  # then the source is broken, not glitching: stop with an error


def send_frame(output: Output, camera: Camera, obj, metadata: dict) -> None:
    """One frame out on `output`: its flat bytes for FORMAT=raw (what dora's image nodes read),
    else a codec message."""
    if camera.config.format == "raw":
        output.send_plain(obj, metadata)
    else:
        output.send(obj, metadata)


def emit(output: Output, camera: Camera, log, outbox: Outbox | None = None) -> bool:
    """Send the next frame on `output` (through `outbox` when it is acknowledged); False when the
    stream is over. A frame that cannot be read or sent is logged and counted, and the camera
    goes on, unless frames keep failing."""
    try:
        message = camera.next_frame()
        if message is None:
            return False
        obj, metadata = message
        if outbox is not None:
            outbox.send(obj, metadata)
        else:
            metadata[P.SENT_NS] = P.now_ns()
            send_frame(output, camera, obj, metadata)
    except Exception as e:
        camera.failed += 1
        camera.failures_in_a_row += 1
        log.error("frame %d skipped: %s: %s", camera.index, type(e).__name__, e)
        if camera.failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
            log.error("stopping: %d frames in a row failed", camera.failures_in_a_row)
            return False
        return True
    camera.failures_in_a_row = 0
    camera.sent += 1
    return True


class CameraSource(NodeLogic):
    """Frames at FPS, or one per tick, while the output window has room (with acks: a consumer
    that falls behind holds the camera back instead of losing frames); then, or after STOP, it
    waits for the frames still unacknowledged (after STOP at most STOP_GRACE_S). A consumer gone
    (its ack input closed) ends it at once."""

    spec = SPEC
    load_config = staticmethod(load_config)
    SENDS_WITH_TC = True  # CUDA frames sent by CUDA IPC live in this process's GPU memory

    def __init__(self, config, device, log):
        super().__init__(config, device, log)
        try:
            self.source = open_source(config, device)
        except SourceError as e:
            raise CannotStart(str(e)) from None
        self.camera = Camera(config, self.source)
        self.pacer = Pacer(config.fps)
        self.producing = True
        self.complete = True  # False: cut short (STOP, a consumer gone, the stream ended)
        self.tick_due = False
        self.just_sent = True  # the first round takes only what is queued
        self.stop_deadline: float | None = None
        self.gone = False
        self.opened = False  # an ack opened the full window this round (more_events)

    def start(self, link: Link) -> None:
        config = self.config
        inputs = link.declared_inputs()
        self.ticked = TICK_INPUT in inputs
        ackers = ackers_of(inputs)
        # WINDOW sized to the consumers' queues (refused, status 2, when it does not fit one).
        window = AckWindow(
            reliable=bool(ackers), ackers=ackers, **sized_window(link, config, ackers, [OUTPUT], self.log)
        )
        self.output = link.output(OUTPUT)
        self.outbox = Outbox(
            window,
            lambda obj, metadata: send_frame(self.output, self.camera, obj, metadata),
            self.log,
            time.monotonic,
            self.refusals,
        )
        acked = f", acknowledged by {', '.join(ackers)} (window {config.window})" if ackers else ""
        self.log.info(
            "%s on %s, %s, format %s%s", self.source.describe(), self.device, self.length(), config.format, acked
        )

    def length(self) -> str:
        """How many frames the node will send, as the start line says it."""
        config = self.config
        if config.frames:
            return f"sends {config.frames} frames"
        if config.source in ("synthetic", "camera") or config.loop:
            return "sends frames until stopped (FRAMES=0)"
        return f"sends every frame of the {'video' if config.source == 'video' else 'folder'}"

    # -- reading: with ticks, block (they wake the loop); else nap until the next frame is due, or
    # wait for an ack
    def wait(self) -> float | None:
        if self.ticked and self.stop_deadline is None and (self.producing or self.outbox.outstanding):
            return None
        if self.just_sent:
            return 0
        if self.producing and not self.ticked and self.outbox.room():
            return max(min(self.pacer.wait_time(), NAP_S), 0.0005)  # paced: nap until the next frame is due
        # Waiting for acks (the window full, or the last frames out): block until one comes, at
        # most until the next resend, probe or give-up is due.
        due = self.outbox.next_due()
        return NAP_S if due is None or self.stop_deadline is not None else max(due, 0.0005)

    def more_events(self) -> bool:
        # A round's reading ends at an ack that opened the full window: the next frame goes before
        # more acks are read, so a flood on one ack input delays no frame behind it.
        return not self.opened

    def _may_send(self) -> bool:
        due = self.tick_due if self.ticked else self.pacer.wait_time() == 0
        return self.producing and self.outbox.room() > 0 and due

    def on_input(self, event: dict) -> None:
        full = not self.outbox.room()
        if self.outbox.on_ack(event):
            self.opened |= full and self.outbox.room() > 0
        elif event["id"] == TICK_INPUT:
            self.tick_due = True

    def on_input_closed(self, input_id: str) -> None:
        if input_id in self.outbox.window.ackers and self.outbox.reliable:
            self.log.error("%s closed: that consumer went away, nothing more can be acknowledged", input_id)
            self._stop(time.monotonic())
            self.gone = True

    def on_stop(self) -> None:
        self._stop(time.monotonic() + STOP_GRACE_S)

    def on_input_over(self) -> None:
        self._stop(time.monotonic())  # no ack can come any more

    def _stop(self, deadline: float) -> None:
        self.complete = self.complete and not self.producing
        self.producing = False
        self.stop_deadline = self.stop_deadline or deadline

    # -- work -------------------------------------------------------------------------------
    def work(self) -> None:
        self.outbox.resend_due()
        self.just_sent = self.opened = False
        if self._may_send():
            self.tick_due = False
            if not emit(self.output, self.camera, self.log, self.outbox):
                self.producing = False
            elif not self.ticked:
                self.pacer.sent()
            self.just_sent = True

    def finished(self) -> bool:
        if self.gone:
            return True
        past_deadline = self.stop_deadline is not None and time.monotonic() >= self.stop_deadline
        return not self.producing and (not self.outbox.outstanding or past_deadline)

    def close(self) -> None:
        self.source.close()

    def finish(self) -> int:
        # Cut short: the frames never sent count as not delivered too (FRAMES=0: endless, none).
        status = self.outbox.end_report("frames", planned=0 if self.complete else self.config.frames)
        delivered = f" ({self.outbox.summary()})" if self.outbox.reliable else ""
        self.log.info("sent %d frames, %d failed%s", self.camera.sent, self.camera.failed, delivered)
        broken = self.camera.failures_in_a_row >= MAX_FAILURES_IN_A_ROW
        return EXIT_FAILED if broken or status else EXIT_OK


def main() -> int:
    return run(CameraSource)
