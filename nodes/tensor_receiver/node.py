"""The `tc-tensor-receiver` node itself: settings, dora, the event loop (main.py answers --help before
any of this is imported)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pyarrow as pa

from ..common.startup import join_dataflow
from ..common.runtime import declared_inputs, declared_outputs, load_node_config, setup_logging
from .spec import SPEC
from .config import ACK_OUTPUT, load_config
from .receiver import Receiver, ack_for
from .verify import LossyBounds
from .report import progress_line, summary_table

_EMPTY = pa.array([], type=pa.uint8())


def _is_timeout(event: dict) -> bool:
    # dora 1.1 reports `next(timeout=...)` running out as this ERROR event
    return str(event.get("error", "")).startswith("Timeout event stream error")


def main() -> int:
    log = setup_logging("tensor-receiver")
    loaded = load_node_config(log, load_config, os.environ)
    if loaded is None:
        return 2
    config, device = loaded
    node = join_dataflow(SPEC, log)
    if node is None:
        return 2
    lossy = LossyBounds(config.jpeg_min_psnr, config.jpeg_max_mad)
    receiver = Receiver(device, config.verify, inputs=declared_inputs(node), lossy=lossy)
    acks = ACK_OUTPUT in declared_outputs(node)
    last_progress = time.monotonic()
    # Let the event stream run out instead of breaking on STOP: dora delivers STOP (and
    # INPUT_CLOSED) before inputs still queued, and breaking would lose them. The timeout only
    # wakes the loop for progress lines while nothing arrives.
    while True:
        event = node.next(timeout=config.progress_s) if config.progress_s else node.next()
        if event is None:
            break
        if event["type"] == "INPUT":
            receiver.handle(event)
            ack = ack_for(event.get("metadata") or {})
            if acks and ack is not None:
                node.send_output(ACK_OUTPUT, _EMPTY, ack)
        elif event["type"] == "ERROR" and not _is_timeout(event):
            log.error("dora reported: %s", str(event.get("error"))[:500])
        del event
        if config.progress_s and time.monotonic() - last_progress >= config.progress_s:
            last_progress = time.monotonic()
            print(progress_line(receiver.report()), flush=True)
    report = receiver.report()
    print(summary_table(report), flush=True)
    if config.report:
        path = Path(config.report)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2))
    return 1 if config.strict and not report["ok"] else 0


if __name__ == "__main__":
    sys.exit(main())
