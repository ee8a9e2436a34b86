"""The `tc-jpeg-sink` node itself, on the node loop (../common/loop.py): the first COUNT JPEGs
checked and saved, the rest counted, each acknowledged when its sender wants it (main.py
answers --help before any of this is imported)."""

from __future__ import annotations

from tensor_codec.dora import Link

from ..common.delivery import SinkIntake, ack_sender
from ..common.loop import EXIT_OK, NodeLogic, run
from .config import INPUT, SPEC, load_config
from .sink import JpegSink


class JpegSinkNode(NodeLogic):
    spec = SPEC
    load_config = staticmethod(load_config)

    def start(self, link: Link) -> None:
        self.sink = JpegSink(self.config.dir, self.config.count, self.config.prefix, self.refusals)
        self.intake = SinkIntake(ack_sender(link))  # acknowledged delivery: see ../common/delivery.py

    def on_input(self, event: dict) -> None:
        if event["id"] != INPUT:
            return
        metadata = event.get("metadata") or {}
        if self.intake.is_new(metadata):
            path = self.sink.handle(event)
            if path is not None:
                self.log.debug("saved %s", path)  # the summary at the end says how many, and where
        self.intake.acknowledge(metadata)

    def finish(self) -> int:
        self.log.info("%s%s", self.sink.summary(), self.intake.summary())
        return EXIT_OK


def main() -> int:
    return run(JpegSinkNode)
