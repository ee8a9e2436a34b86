"""Console script `tc-jpeg-sink`: see ../README.md and dora-node.yml."""

from __future__ import annotations

import os
import sys

from ..common.runtime import setup_logging
from ..common.settings import SettingError
from .config import INPUT, load_config
from .sink import JpegSink


def main() -> int:
    log = setup_logging("jpeg-sink")
    try:
        config = load_config(os.environ)
    except SettingError as e:
        log.error("%s", e)
        return 2
    from dora import Node

    node = Node()
    sink = JpegSink(config.dir, config.count, config.prefix)
    for event in node:
        if event["type"] == "INPUT" and event["id"] == INPUT:
            path = sink.handle(event)
            if path is not None:
                log.info("saved %s", path)
        elif event["type"] == "ERROR":
            log.error("dora reported: %s", str(event.get("error"))[:500])
    log.info("%s", sink.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
