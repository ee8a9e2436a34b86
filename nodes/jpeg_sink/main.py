"""Console script `tc-jpeg-sink`: see ../README.md and dora-node.yml."""

from __future__ import annotations

import os
import sys

from ..common.runtime import load_node_config, setup_logging
from .config import INPUT, load_config
from .sink import JpegSink


def main() -> int:
    log = setup_logging("jpeg-sink")
    loaded = load_node_config(log, load_config, os.environ)
    if loaded is None:
        return 2
    config, _ = loaded
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
