"""Console script `tc-jpeg-decoder`: see ../README.md and dora-node.yml."""

from __future__ import annotations

import contextlib
import os
import sys

import torch

import tensor_codec as tc

from ..common import protocol as P
from ..common.runtime import finish_sharing, load_node_config, setup_logging
from .config import INPUT, OUTPUT, load_config
from .decoder import JpegDecoder


def main() -> int:
    log = setup_logging("jpeg-decoder")
    loaded = load_node_config(log, load_config, os.environ)
    if loaded is None:
        return 2
    config, device = loaded
    from dora import Node

    node = Node()
    decoder = JpegDecoder(device, config.mode, config.max_pixels)
    log.info("%s on %s, mode %s, batch %d", "nvJPEG" if device.type == "cuda" else "CPU decoder", device, config.mode, config.batch)
    # The node's own stream: decoding is fenced and ordered on it, and sending reads from it.
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        ended = False
        while not ended:
            # Take what is queued, up to BATCH, then decode it together. Runs until the event
            # stream ends (dora delivers STOP before inputs still queued).
            events = [node.next()]
            while len(events) < config.batch:
                event = node.try_recv()
                if event is None:
                    break
                events.append(event)
            batch = []
            for event in events:
                if event is None:
                    ended = True
                elif event["type"] == "INPUT" and event["id"] == INPUT:
                    checked = decoder.check(event)
                    if checked is not None:
                        batch.append(checked)
                elif event["type"] == "ERROR":
                    log.error("dora reported: %s", str(event.get("error"))[:500])
            events = event = None  # no reference to a message's buffer outlives the loop
            for image, metadata in decoder.decode(batch):
                metadata[P.SENT_NS] = P.now_ns()
                try:
                    tc.send(node, OUTPUT, image, metadata)
                except Exception as e:
                    decoder.send_failed(metadata, e)
    finish_sharing(log)  # decoded images sent by CUDA IPC live in this process's GPU memory
    log.info("%s", decoder.stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
