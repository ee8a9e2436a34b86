"""The `tc-monitor` node itself, on the node loop (../common/loop.py): every message looked at and
counted, a line per input every PERIOD_S, the summary table at the end (main.py answers --help
before any of this is imported)."""

from __future__ import annotations

import time

from tensor_codec.dora import Link

from ..common.loop import EXIT_OK, NodeLogic, run
from .config import SPEC, load_config
from .monitor import Monitor, echo_line


def pass_ipc(metadata: dict) -> None:
    """Claim and release a CUDA IPC message's ledger slot at once: nothing mapped, no CUDA call."""
    from tensor_codec.transports import get_transport

    get_transport("cuda-ipc").pass_unread(metadata)


class MonitorNode(NodeLogic):
    """Runs until the event stream runs out (dora delivers STOP before inputs still queued); it
    sends nothing, so it never holds a sender up."""

    spec = SPEC
    load_config = staticmethod(load_config)

    def start(self, link: Link) -> None:
        config = self.config
        self.monitor = Monitor(
            link.declared_inputs(),
            width=config.max_shown,
            depth=config.max_depth,
            refusals=self.refusals,
            pass_ipc=pass_ipc,
        )
        self.next_report = time.monotonic() + config.period_s

    def wait(self) -> float | None:
        if not self.config.period_s:
            return None
        return max(0.0, self.next_report - time.monotonic())  # the timeout only wakes the loop for a report

    def more_events(self) -> bool:
        return not self._due()

    def on_input(self, event: dict) -> None:
        seen = self.monitor.handle(event.get("id"), event.get("value"), event.get("metadata"))
        if self.config.echo and seen is not None:
            print(echo_line(str(event.get("id"))[:64], seen), flush=True)

    def work(self) -> None:
        if self._due():
            now = time.monotonic()
            self.next_report = max(self.next_report + self.config.period_s, now)
            lines = self.monitor.report(now)
            if lines:
                print("\n".join(lines), flush=True)

    def _due(self) -> bool:
        return bool(self.config.period_s) and time.monotonic() >= self.next_report

    def finish(self) -> int:
        print(self.monitor.summary(), flush=True)
        return EXIT_OK


def main() -> int:
    return run(MonitorNode)
