"""Console script `tc-tensor-receiver`: see ../README.md and dora-node.yml."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pyarrow as pa

from ..common import protocol as P
from ..common.device import resolve_device
from ..common.runtime import declared_outputs, setup_logging
from ..common.settings import SettingError
from .config import ACK_OUTPUT, load_config
from .receiver import Receiver
from .report import progress_line, summary_table

_EMPTY = pa.array([], type=pa.uint8())


def main() -> int:
    log = setup_logging("tensor-receiver")
    try:
        config = load_config(os.environ)
        device = resolve_device(config.device)
    except SettingError as e:
        log.error("%s", e)
        return 2
    from dora import Node

    node = Node()
    receiver = Receiver(device, config.verify)
    acks = ACK_OUTPUT in declared_outputs(node)
    last_progress = time.monotonic()
    # Let the event stream run out instead of breaking on STOP: dora delivers STOP (and
    # INPUT_CLOSED) before inputs still queued, and breaking would lose them.
    for event in node:
        if event["type"] != "INPUT":
            continue
        receiver.handle(event)
        metadata = event.get("metadata") or {}
        if acks and metadata.get(P.WANTS_ACK) is True and type(metadata.get(P.SEQ)) is int:
            node.send_output(ACK_OUTPUT, _EMPTY, {P.SEQ: metadata[P.SEQ], P.STREAM: str(metadata.get(P.STREAM, ""))})
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
