"""Console script `tc-camera-source`: see ../README.md and dora-node.yml."""

from __future__ import annotations

import os
import sys

import tensor_codec as tc

from ..common import protocol as P
from ..common.device import resolve_device
from ..common.runtime import Pacer, declared_inputs, drain, setup_logging
from ..common.settings import SettingError
from .camera import Camera
from .config import OUTPUT, TICK_INPUT, load_config
from .sources import SourceError, open_source


def emit(node, camera: Camera) -> bool:
    """Send the next frame; False when the stream is over."""
    message = camera.next_frame()
    if message is None:
        return False
    obj, metadata = message
    metadata[P.SENT_NS] = P.now_ns()
    if camera.config.format == "raw":
        tc.send_plain(node, OUTPUT, obj, metadata)
    else:
        tc.send(node, OUTPUT, obj, metadata)
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
                if event["type"] == "INPUT" and event["id"] == TICK_INPUT and not emit(node, camera):
                    break
        else:
            pacer = Pacer(config.fps)
            while True:
                if any(e["type"] == "STOP" for e in drain(node)):
                    break
                if pacer.wait_time() > 0:
                    pacer.sleep()
                    continue
                if not emit(node, camera):
                    break
                pacer.sent()
    finally:
        source.close()
    log.info("sent %d frames", camera.index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
