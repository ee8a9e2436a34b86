"""The `tc-camera-source` node itself: settings, dora, the event loop (main.py answers --help before
any of this is imported)."""

from __future__ import annotations

import os
import sys
import time

import tensor_codec as tc

from ..common.startup import join_dataflow
from ..common import protocol as P
from ..common.delivery import STOP_GRACE_S, AckWindow, Outbox, ackers_of
from ..common.device import resolve_device
from ..common.runtime import declared_inputs, drain, finish_sharing, Pacer, setup_logging
from ..common.settings import SettingError
from .camera import Camera
from .spec import SPEC
from .config import OUTPUT, TICK_INPUT, load_config
from .sources import SourceError, open_source


MAX_FAILURES_IN_A_ROW = 30  # then the source is broken, not glitching: stop with an error


def send_frame(node, camera: Camera, obj, metadata: dict) -> None:
    if camera.config.format == "raw":
        tc.send_plain(node, OUTPUT, obj, metadata)
    else:
        tc.send(node, OUTPUT, obj, metadata)


def emit(node, camera: Camera, log, outbox: Outbox | None = None) -> bool:
    """Send the next frame (through `outbox` when the output is acknowledged); False when the
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
            send_frame(node, camera, obj, metadata)
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


def run(node, camera: Camera, outbox: Outbox, ticked: bool, log) -> bool:
    """Frames at FPS, or one per tick, while the output window has room (with acks: a consumer
    that falls behind holds the camera back instead of losing frames); then, or after STOP, wait
    for the frames still unacknowledged (after STOP at most STOP_GRACE_S).
    -> True if the stream ran to its end, False if it was cut short (STOP, a consumer gone)."""
    pacer = Pacer(camera.config.fps)
    window = outbox.window
    producing = True
    complete = True
    tick_due = False
    stop_deadline = None
    while True:
        block = ticked and stop_deadline is None and (producing or outbox.outstanding)
        events = ([node.next()] if block else []) + drain(node)  # with ticks, block: they wake us
        for event in events:
            if event is None:
                producing, complete = False, complete and not producing
                stop_deadline = stop_deadline or time.monotonic()  # the event stream ended
            elif outbox.on_ack(event):
                pass
            elif event["type"] == "STOP":
                producing, complete = False, complete and not producing
                stop_deadline = stop_deadline or time.monotonic() + STOP_GRACE_S
            elif event["type"] == "INPUT_CLOSED" and event.get("id") in window.ackers and outbox.reliable:
                log.error("%s closed: that consumer went away, nothing more can be acknowledged", event["id"])
                for later in drain(node):  # acks queued behind INPUT_CLOSED (dora hands it out first)
                    outbox.on_ack(later)
                return complete and not producing
            elif event["type"] == "INPUT" and event.get("id") == TICK_INPUT:
                tick_due = True
        outbox.resend_due()
        if not producing and (not outbox.outstanding or (stop_deadline is not None and time.monotonic() >= stop_deadline)):
            return complete
        if producing and outbox.room() and (tick_due if ticked else pacer.wait_time() == 0):
            tick_due = False
            if not emit(node, camera, log, outbox):
                producing = False
            elif not ticked:
                pacer.sent()
            continue
        if not block:  # waiting for the next frame's time, or for acks
            pause = pacer.wait_time() if producing and not ticked and outbox.room() else 0.002
            time.sleep(max(min(pause, 0.002), 0.0005))


def main() -> int:
    log = setup_logging("camera-source")
    try:
        config = load_config(os.environ)
        device = resolve_device(config.device)
        source = open_source(config, device)
    except (SettingError, SourceError) as e:
        log.error("%s", e)
        return 2
    node = join_dataflow(SPEC, log)
    if node is None:
        return 2
    camera = Camera(config, source)
    inputs = declared_inputs(node)
    ackers = ackers_of(inputs)
    window = AckWindow(reliable=bool(ackers), window=config.window, retry_s=config.retry_s, give_up_s=config.ack_timeout_s, ackers=ackers)
    outbox = Outbox(window, lambda obj, metadata: send_frame(node, camera, obj, metadata), log, time.monotonic)
    acked = f", acknowledged by {', '.join(ackers)} (window {config.window})" if ackers else ""
    log.info("%s %dx%d on %s, %s frames, format %s%s", config.source, config.width, config.height, device, config.frames or "endless", config.format, acked)
    try:
        complete = run(node, camera, outbox, TICK_INPUT in inputs, log)
    finally:
        source.close()
    # Cut short: the frames never sent count as not delivered too (FRAMES=0: endless, none).
    status = outbox.end_report("frames", planned=0 if complete else config.frames)
    finish_sharing(log)  # CUDA frames sent by CUDA IPC live in this process's GPU memory
    delivered = f" ({outbox.summary()})" if outbox.reliable else ""
    log.info("sent %d frames, %d failed%s", camera.sent, camera.failed, delivered)
    return 1 if camera.failures_in_a_row >= MAX_FAILURES_IN_A_ROW or status else 0


if __name__ == "__main__":
    sys.exit(main())
