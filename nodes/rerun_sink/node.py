"""The `tc-rerun-sink` node itself: settings, rerun-sdk, dora, the event loop (main.py answers
--help before any of this is imported)."""

from __future__ import annotations

import os
import sys

import tensor_codec as tc

from ..common.delivery import EMPTY, SinkIntake
from ..common.runtime import declared_outputs, load_node_config, setup_logging
from ..common.startup import join_dataflow
from . import sdk
from .config import ACK_OUTPUT, load_config
from .spec import SPEC


def main() -> int:
    log = setup_logging("rerun-sink")
    loaded = load_node_config(log, load_config, os.environ)
    if loaded is None:
        return 2
    config, _ = loaded
    why = sdk.missing()
    if why is not None and config.required:
        log.error("%s", why)
        return 2
    if why is None:
        # rerun (and torchvision's box conversions): imported before joining, as dora starts the
        # flow once every node has joined; after it, their seconds would go by with messages waiting.
        from .sink import RerunSink
    node = join_dataflow(SPEC, log)
    if node is None:
        return 2
    if why is None:
        file = _prepare(config.file)
        sink = RerunSink(sdk.open_recording(config.app_id, file, config.viewer), config.split_key)
        where = ([f"{file} (open it with: rerun {file})"] if file else []) + ([f"the viewer at {config.viewer}"] if config.viewer else [])
        log.info("recording to %s", " and ".join(where))
    else:
        sink = None
        log.warning("%s; REQUIRED=0: taking the inputs without recording them", why)
    # acknowledged delivery (see ../common/delivery.py) when the dataflow declares the ack output
    send_ack = (lambda ack: node.send_output(ACK_OUTPUT, EMPTY, ack)) if ACK_OUTPUT in declared_outputs(node) else None
    intake = SinkIntake(send_ack)
    taken = 0
    for event in node:
        if event["type"] == "INPUT":
            metadata = event.get("metadata") or {}
            if intake.is_new(metadata):
                taken += 1
                if sink is not None:
                    sink.handle(event["id"], event.get("value"), metadata)
                elif "tc.version" in metadata:
                    _release_unshown(event, log)
            del event
            intake.acknowledge(metadata)
        elif event["type"] == "ERROR":
            log.error("dora reported: %s", str(event.get("error"))[:500])
    duplicates = intake.duplicates
    dup = f", {duplicates} duplicates skipped" if duplicates else ""
    if sink is None:
        log.info("took %d messages, recorded none (no rerun-sdk)%s", taken, dup)
        return 0
    failed = sink.close()
    log.info("%s%s; %d entities", sink.summary(), dup, len(sink.entities))
    if config.file:
        print(f"rerun-sink: recording written to {config.file}: open it with `rerun {config.file}`", flush=True)
    if failed:
        log.error("the recording did not all reach %s: %s", config.viewer or config.file, failed)
        return 1
    return 0


def _release_unshown(event: dict, log) -> None:
    """Give a tensor_codec message back without showing it: a CUDA IPC message's producer keeps
    its GPU memory until every consumer has claimed and released it (decoding and releasing a
    host message costs nothing: zero-copy)."""
    try:
        with tc.scope():
            tc.receive(event)
    except tc.CodecError as e:
        log.error("input %s: a bad message taken: %s", event.get("id"), str(e)[:300])


def _prepare(file: str | None) -> str | None:
    """The .rrd's folder exists; a recording of an earlier run is replaced, not appended to."""
    if file is None:
        return None
    folder = os.path.dirname(file)
    if folder:
        os.makedirs(folder, exist_ok=True)
    return file


if __name__ == "__main__":
    sys.exit(main())
