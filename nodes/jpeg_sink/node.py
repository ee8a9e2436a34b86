"""The `tc-jpeg-sink` node itself: settings, dora, the event loop (main.py answers --help before
any of this is imported)."""

from __future__ import annotations

import os
import sys

from ..common.startup import join_dataflow
from ..common.delivery import EMPTY, SinkIntake
from ..common.runtime import declared_outputs, load_node_config, setup_logging
from .spec import SPEC
from .config import ACK_OUTPUT, INPUT, load_config
from .sink import JpegSink


def main() -> int:
    log = setup_logging("jpeg-sink")
    loaded = load_node_config(log, load_config, os.environ)
    if loaded is None:
        return 2
    config, _ = loaded
    node = join_dataflow(SPEC, log)
    if node is None:
        return 2
    sink = JpegSink(config.dir, config.count, config.prefix)
    # acknowledged delivery (see ../common/delivery.py) when the dataflow declares the ack output
    send_ack = (lambda ack: node.send_output(ACK_OUTPUT, EMPTY, ack)) if ACK_OUTPUT in declared_outputs(node) else None
    intake = SinkIntake(send_ack)
    for event in node:
        if event["type"] == "INPUT" and event["id"] == INPUT:
            metadata = event.get("metadata") or {}
            if intake.is_new(metadata):
                path = sink.handle(event)
                if path is not None:
                    log.info("saved %s", path)
            intake.acknowledge(metadata)
        elif event["type"] == "ERROR":
            log.error("dora reported: %s", str(event.get("error"))[:500])
    duplicates = intake.duplicates
    log.info("%s%s", sink.summary(), f", {duplicates} duplicates skipped" if duplicates else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
