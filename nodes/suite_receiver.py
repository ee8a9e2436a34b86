"""dora node: receive tensor_codec messages, verify each against the sample suite, report.

Each message is decoded inside a `tc.scope()` (zero-copy views are released, and checked for
in-place writes, as soon as it is handled), compared bit-exactly with the object the sender
built for the same `case`, and counted: good, bad, rejected (a corrupted message the sender
marked `expect: reject`, refused with a CodecError as it must be), missing, out of order. A bad
message is logged and counted; the node goes on. Prints a progress line now and then and a
summary at the end; writes a JSON report to REPORT (if set). With STRICT=1 (default) it exits 1
if anything was bad or missing.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import torch

import tensor_codec as tc
from tensor_codec.testing import assert_identical, make_suite

log = logging.getLogger("suite_receiver")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_sender import big_tensor  # noqa: E402  (same folder; rebuilds the big case)


@dataclass
class Report:
    received: int = 0
    good: int = 0
    bad: int = 0
    rejected: int = 0
    missing: int = 0
    out_of_order: int = 0
    duplicates: int = 0  # retransmissions of messages dora lost or whose ack it lost
    expected_total: int | None = None
    failures: list[str] = field(default_factory=list)
    by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.bad == 0 and self.missing == 0 and self.expected_total is not None


class Verifier:
    """Pure per-message logic (no dora): expected objects by case name, counters."""

    def __init__(self, seed: int = 0):
        self.suite = make_suite(seed)
        self.seed = seed
        self.report = Report()
        self.next_seq = 0
        self.seen: set[int] = set()

    def expected(self, case: str) -> Any:
        if case in self.suite:
            return self.suite[case]
        if case.startswith("big/") and case.endswith("MB"):
            return big_tensor(int(case[4:-2]), self.seed)
        if case == "mutated_after_send":
            return torch.arange(12.0).reshape(3, 4)
        raise KeyError(f"unknown case {case!r}")

    def handle(self, event: dict) -> str:
        """Check one INPUT event; -> 'good', 'rejected', 'bad' or 'duplicate' (counted)."""
        metadata = event.get("metadata") or {}
        case, seq = metadata.get("case", "?"), metadata.get("seq")
        if isinstance(seq, int):
            if seq in self.seen:  # a retransmission after a lost ack: already checked
                self.report.duplicates += 1
                return "duplicate"
            if seq < self.next_seq:
                self.report.out_of_order += 1
            self.seen.add(seq)
            self.next_seq = max(self.next_seq, seq + 1)
        self.report.received += 1
        try:
            with tc.scope():
                obj = tc.receive(event)
                if metadata.get("expect") == "reject":
                    return self._bad(case, "a corrupted message was accepted")
                assert_identical(obj, self.expected(case))
        except tc.CodecError as e:
            if metadata.get("expect") == "reject":
                self.report.rejected += 1
                return "rejected"
            return self._bad(case, f"{type(e).__name__}: {e}")
        except (AssertionError, KeyError) as e:
            return self._bad(case, str(e))
        self.report.good += 1
        kind = case.split("/")[0]
        self.report.by_kind[kind] = self.report.by_kind.get(kind, 0) + 1
        return "good"

    def _bad(self, case: str, reason: str) -> str:
        self.report.bad += 1
        message = f"{case}: {reason}"
        if len(self.report.failures) < 50:
            self.report.failures.append(message[:500])
        log.error("bad message %s", message)
        return "bad"

    def finish(self, expected_total: int | None) -> Report:
        self.report.expected_total = expected_total
        if expected_total is not None:
            self.report.missing = expected_total - len(self.seen)
        return self.report


def summary(report: Report) -> str:
    status = "PASS" if report.ok else "FAIL"
    lines = [
        f"tensor_codec suite: {status}",
        f"  received {report.received} of {report.expected_total}   good {report.good}   rejected as corrupt {report.rejected}",
        f"  bad {report.bad}   missing {report.missing}   out of order {report.out_of_order}   "
        f"retransmitted {report.duplicates} (lost by dora, recovered)",
        "  good by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(report.by_kind.items())),
    ]
    lines += [f"  failure: {f}" for f in report.failures[:10]]
    return "\n".join(lines)


def main() -> int:
    from dora import Node

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    seed = int(os.environ.get("SEED", "0"))
    strict = os.environ.get("STRICT", "1") == "1"
    verifier = Verifier(seed)
    node = Node()
    expected_total = None
    last_progress = time.monotonic()
    # Let the event stream run out instead of breaking on STOP: dora delivers STOP before inputs
    # still queued, and breaking would lose them.
    for event in node:
        if event["type"] != "INPUT":
            continue
        metadata = event.get("metadata") or {}
        if event["id"] == "done":
            expected_total = int(metadata["count"])
        else:
            try:
                verifier.handle(event)
            except Exception as e:  # never die on one message
                verifier._bad(str(metadata.get("case")), f"unexpected {type(e).__name__}: {e}")
        if isinstance(metadata.get("seq"), int):
            node.send_output("ack", pa.array([], type=pa.uint8()), {"seq": metadata["seq"]})
        if time.monotonic() - last_progress > 1.0:
            last_progress = time.monotonic()
            r = verifier.report
            print(f"progress: {r.received} received, {r.good} good, {r.bad} bad", flush=True)
    report = verifier.finish(expected_total)
    print(summary(report), flush=True)
    path = os.environ.get("REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({**asdict(report), "ok": report.ok}, f, indent=2)
    return 1 if strict and not report.ok else 0


if __name__ == "__main__":
    sys.exit(main())
