"""Console script `tc-camera-source`: see ../README.md and dora-node.yml."""

from __future__ import annotations

import os
import sys

import tensor_codec as tc

from ..common import protocol as P
from ..common.device import resolve_device
from ..common.runtime import Pacer, declared_inputs, drain, finish_sharing, setup_logging
from ..common.settings import SettingError
from .camera import Camera
from .config import OUTPUT, TICK_INPUT, load_config
from .sources import SourceError, open_source


MAX_FAILURES_IN_A_ROW = 30  # then the source is broken, not glitching: stop with an error


def emit(node, camera: Camera, log) -> bool:
    """Send the next frame; False when the stream is over. A frame that cannot be read or sent
    is logged and counted, and the camera goes on, unless frames keep failing."""
    try:
        message = camera.next_frame()
        if message is None:
            return False
        obj, metadata = message
        metadata[P.SENT_NS] = P.now_ns()
        if camera.config.format == "raw":
            tc.send_plain(node, OUTPUT, obj, metadata)
        else:
            tc.send(node, OUTPUT, obj, metadata)
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


def main() -> int:
    log = setup_logging("camera-source")
    try:
        config = load_config(os.environ)
        device = resolve_device(config.device)
        source = open_source(config, device)
    except (SettingError, SourceError) as e:
        log.error("%s", e)
        return 2
    from dora import Node

    node = Node()
    camera = Camera(config, source)
    log.info("%s %dx%d on %s, %s frames, format %s", config.source, config.width, config.height, device, config.frames or "endless", config.format)
    try:
        if TICK_INPUT in declared_inputs(node):
            for event in node:  # one frame per tick; the stream ends when dora stops the node
                if event["type"] == "INPUT" and event["id"] == TICK_INPUT and not emit(node, camera, log):
                    break
        else:
            pacer = Pacer(config.fps)
            while True:
                if any(e["type"] == "STOP" for e in drain(node)):
                    break
                if pacer.wait_time() > 0:
                    pacer.sleep()
                    continue
                if not emit(node, camera, log):
                    break
                pacer.sent()
    finally:
        source.close()
    finish_sharing(log)  # CUDA frames sent by CUDA IPC live in this process's GPU memory
    log.info("sent %d frames, %d failed", camera.sent, camera.failed)
    return 1 if camera.failures_in_a_row >= MAX_FAILURES_IN_A_ROW else 0


if __name__ == "__main__":
    sys.exit(main())
