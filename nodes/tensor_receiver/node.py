"""The `tc-tensor-receiver` node itself, on the node loop (../common/loop.py): every message
restored, verified and counted, acknowledged when its sender wants it, a progress line every
PROGRESS_S and the summary at the end (main.py answers --help before any of this is imported)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tensor_codec.dora import Link

from ..common.delivery import ack_for, ack_sender
from ..common.loop import EXIT_FAILED, EXIT_OK, NodeLogic, run
from .config import SPEC, load_config
from .receiver import Receiver
from .report import progress_line, summary_table
from .verify import LossyBounds


class TensorReceiver(NodeLogic):
    """Runs until the event stream runs out, not on STOP: dora delivers STOP (and INPUT_CLOSED)
    before inputs still queued, and ending then would lose them."""

    spec = SPEC
    load_config = staticmethod(load_config)

    def start(self, link: Link) -> None:
        lossy = LossyBounds(self.config.jpeg_min_psnr, self.config.jpeg_max_mad)
        self.receiver = Receiver(
            self.device,
            self.config.verify,
            inputs=link.declared_inputs(),
            lossy=lossy,
            verify_max_bytes=self.config.verify_max_bytes,
            refusals=self.refusals,
        )
        self.send_ack = ack_sender(link)
        self.last_progress = time.monotonic()

    def wait(self) -> float | None:
        return self.config.progress_s or None  # the timeout only wakes the loop for progress lines

    def more_events(self) -> bool:
        return not self._progress_due()

    def on_input(self, event: dict) -> None:
        self.receiver.handle(event)
        ack = ack_for(event.get("metadata") or {})
        if self.send_ack is not None and ack is not None:
            self.send_ack(ack)

    def work(self) -> None:
        if self._progress_due():
            self.last_progress = time.monotonic()
            print(progress_line(self.receiver.report()), flush=True)

    def _progress_due(self) -> bool:
        return bool(self.config.progress_s) and time.monotonic() - self.last_progress >= self.config.progress_s

    def finish(self) -> int:
        report = self.receiver.report()
        print(summary_table(report), flush=True)
        if self.config.report:
            path = Path(self.config.report)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(report, indent=2))
        return EXIT_FAILED if self.config.strict and not report["ok"] else EXIT_OK


def main() -> int:
    return run(TensorReceiver)
