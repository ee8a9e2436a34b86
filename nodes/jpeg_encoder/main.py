"""Console script `tc-jpeg-encoder`: see ../README.md and dora-node.yml."""

from __future__ import annotations

import os
import sys

import tensor_codec as tc

from ..common import protocol as P
from ..common.runtime import load_node_config, setup_logging
from .config import INPUT, OUTPUT, load_config
from .encoder import JpegEncoder
from .engines import make_engine

POLL_S = 0.002  # while batches are in flight: how long to wait for one before looking for input


def main() -> int:
    log = setup_logging("jpeg-encoder")
    loaded = load_node_config(log, load_config, os.environ)
    if loaded is None:
        return 2
    config, device = loaded
    from dora import Node

    node = Node()
    engine = make_engine(device, config.quality, config.workers)
    encoder = JpegEncoder(engine, config.quality, config.batch)
    what = f"nvJPEG (torchvision, fenced by the {engine.fence})" if device.type == "cuda" else "torchvision's CPU encoder"
    log.info("%s on %s, quality %d, batch %d, %d workers", what, device, config.quality, config.batch, config.workers)
    ended = False
    try:
        # Run until the event stream ends (not on STOP: dora delivers STOP before inputs still
        # queued), then finish what is in flight.
        while not ended or encoder.busy:
            got_input = False
            # Idle: block for the next event. Busy: take only what is already queued, and no
            # more than the encoder has room for (the rest waits in dora's queue).
            while not ended and encoder.can_accept:
                event = node.try_recv() if encoder.busy else node.next()
                if event is None:
                    ended = not encoder.busy  # try_recv's None only means "nothing queued"
                    break
                if event["type"] == "INPUT" and event["id"] == INPUT:
                    got_input |= encoder.accept(event)
                elif event["type"] == "ERROR":
                    log.error("dora reported: %s", str(event.get("error"))[:500])
                del event
            encoder.dispatch()
            for data, metadata in encoder.collect(0 if got_input and not ended else POLL_S):
                metadata[P.SENT_NS] = P.now_ns()
                try:
                    tc.send_plain(node, OUTPUT, data, metadata)
                except Exception as e:  # one failed send is logged and counted
                    encoder.send_failed(metadata, e)
    finally:
        encoder.close()
    log.info("%s", encoder.stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
