"""The `tc-rerun-sink` node itself, on the node loop (../common/loop.py): every message shown in
rerun (or, without rerun-sdk and REQUIRED=0, only taken), each acknowledged when its sender wants
it (main.py answers --help before any of this is imported)."""

from __future__ import annotations

import os

import tensor_codec as tc
from tensor_codec.dora import Link

from ..common import protocol as P
from ..common.delivery import SinkIntake, ack_sender
from ..common.loop import EXIT_FAILED, EXIT_OK, CannotStart, NodeLogic, run
from . import sdk
from .config import SPEC, load_config


class RerunSinkNode(NodeLogic):
    spec = SPEC
    load_config = staticmethod(load_config)

    def __init__(self, config, device, log):
        super().__init__(config, device, log)
        self.why = sdk.missing()  # None: rerun-sdk is there
        if self.why is not None and config.required:
            raise CannotStart(self.why)
        if self.why is None:
            # rerun (and torchvision's box conversions): imported before joining, as dora starts the
            # flow once every node has joined; after it, their seconds would go by with messages waiting.
            from .sink import RerunSink

            self.RerunSink = RerunSink
        self.sink = None
        self.taken = 0
        self.refused = 0  # without rerun-sdk: bad messages their sender marked expect=reject

    def start(self, link: Link) -> None:
        config = self.config
        if self.why is None:
            file = _prepare(config.file)
            self.sink = self.RerunSink(sdk.open_recording(config.app_id, file, config.viewer), config.split_key)
            where = ([f"{file} (open it with: rerun {file})"] if file else []) + (
                [f"the viewer at {config.viewer}"] if config.viewer else []
            )
            self.log.info("recording to %s", " and ".join(where))
        else:
            self.log.warning("%s; REQUIRED=0: taking the inputs without recording them", self.why)
        self.intake = SinkIntake(ack_sender(link))  # acknowledged delivery: see ../common/delivery.py

    def on_input(self, event: dict) -> None:
        metadata = event.get("metadata") or {}
        if self.intake.is_new(metadata):
            self.taken += 1
            if self.sink is not None:
                self.sink.handle(event["id"], event.get("value"), metadata)
            elif tc.is_codec_message(metadata):
                self.refused += _release_unshown(event, metadata, self.log)
        self.intake.acknowledge(metadata)

    def finish(self) -> int:
        dup = self.intake.summary()
        if self.sink is None:
            refused = f", {self.refused} refused as expected" if self.refused else ""
            self.log.info("took %d messages, recorded none (no rerun-sdk)%s%s", self.taken, refused, dup)
            return EXIT_OK
        failed = self.sink.close()
        self.log.info("%s%s; %d entities", self.sink.summary(), dup, len(self.sink.entities))
        if self.config.file:
            print(
                f"rerun-sink: recording written to {self.config.file}: open it with `rerun {self.config.file}`",
                flush=True,
            )
        if failed:
            self.log.error("the recording did not all reach %s: %s", self.config.viewer or self.config.file, failed)
            return EXIT_FAILED
        return EXIT_OK


def _release_unshown(event: dict, metadata: dict, log) -> int:
    """Give a tensor_codec message back without showing it: a CUDA IPC message's producer keeps
    its GPU memory until every consumer has claimed and released it (decoding and releasing a
    host message costs nothing: zero-copy). -> 1 for a bad message its sender marked
    expect=reject (counted, not an error: the suite's corrupted messages), else 0."""
    try:
        with tc.scope():
            tc.receive(event)
    except tc.CodecError as e:
        if P.to_be_refused(metadata):
            log.debug("input %s: refused as its sender expected: %s", event.get("id"), e)
            return 1
        log.error("input %s: a bad message taken: %s", event.get("id"), str(e)[:300])
    return 0


def _prepare(file: str | None) -> str | None:
    """The .rrd's folder exists; a recording of an earlier run is replaced, not appended to."""
    if file is None:
        return None
    folder = os.path.dirname(file)
    if folder:
        os.makedirs(folder, exist_ok=True)
    return file


def main() -> int:
    return run(RerunSinkNode)
