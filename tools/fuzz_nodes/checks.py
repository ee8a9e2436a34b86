"""Holding one target's run to what was sent: per bucket, what the hostile node says it sent
against what the node under test counted; then that the run ended, the node's exit status, no
traceback, no refusal of a kind nobody sent, dora dropped nothing, and the real traffic through
the node all delivered. Every row and check is strict: equal, or the target fails."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from . import counts
from .dora_run import DoraRun
from .flows import SINK_SAVES, UNDER_TEST, FlowParams
from .schedule import (
    ACCEPTED_JPEG,
    BAD_FRAME,
    BAD_JPEG,
    BAD_MESSAGE,
    DESCRIBED,
    DUPLICATE,
    MALFORMED_ACK,
    REJECTED,
    STRAY_ACK,
    UNVERIFIED,
)

__all__ = ["Row", "TargetResult", "check_run", "BUCKETS"]

# The buckets each target's node counts (a bucket the hostile node sent none of is expected 0).
BUCKETS = {
    "sender": (MALFORMED_ACK, STRAY_ACK),
    "camera": (MALFORMED_ACK, STRAY_ACK),
    "receiver": (BAD_MESSAGE, UNVERIFIED, DUPLICATE, REJECTED),
    "decoder": (BAD_JPEG,),
    "encoder": (BAD_FRAME,),
    "sink": (BAD_JPEG, ACCEPTED_JPEG),
    "monitor": (BAD_MESSAGE, DESCRIBED),
    "encoder-ack": (MALFORMED_ACK, STRAY_ACK),
    "decoder-ack": (MALFORMED_ACK, STRAY_ACK),
}


@dataclass
class Row:
    """One figure: what was sent (or should have arrived) against what the node counted."""

    name: str
    sent: int | None
    counted: int | None
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.sent is not None and self.sent == self.counted


@dataclass
class TargetResult:
    target: str
    label: str  # "sender" or "sender (clean)"
    params: FlowParams
    wall_s: float
    rows: list[Row] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # checks that failed, each saying why
    passed_checks: list[str] = field(default_factory=list)
    sent: dict = field(default_factory=dict)  # the hostile node's record
    figures: dict = field(default_factory=dict)  # throughput and the like

    @property
    def ok(self) -> bool:
        return not self.problems and all(row.ok for row in self.rows)

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "label": self.label,
            "ok": self.ok,
            "wall_s": round(self.wall_s, 2),
            "rows": [
                {"name": r.name, "sent": r.sent, "counted": r.counted, "ok": r.ok, "note": r.note} for r in self.rows
            ],
            "problems": self.problems,
            "checks": self.passed_checks,
            "categories": self.sent.get("sent", {}),
            "figures": self.figures,
            "workdir": str(self.params.workdir),
        }


class _Checker:
    def __init__(self, result: TargetResult):
        self.result = result

    def check(self, ok: bool, passed: str, failed: str) -> bool:
        (self.result.passed_checks if ok else self.result.problems).append(passed if ok else failed)
        return ok

    def row(self, name: str, sent: int | None, counted: int | None, note: str = "") -> None:
        self.result.rows.append(Row(name, sent, counted, note))


def _last_lines(text: str, n: int = 12) -> str:
    lines = [line for line in text.splitlines() if line.strip()][-n:]
    return "\n    ".join(lines)


def check_run(target: str, label: str, run: DoraRun, p: FlowParams) -> TargetResult:
    node_id, script, hostile_input = UNDER_TEST[target]
    result = TargetResult(target, label, p, run.wall_s)
    c = _Checker(result)
    log = run.log(node_id)
    codes = run.exit_codes()

    c.check(
        run.timed_out is None,
        f"ended in {run.wall_s:.1f} s",
        f"the dataflow did not end within {run.timed_out} s (a hang): the last lines of {node_id}'s log:\n    "
        f"{_last_lines(log)}",
    )
    code = codes.get(node_id, 0)
    c.check(
        code == 0,
        f"{node_id} exited 0",
        f"{node_id} ({script}) exited with status {code}, expected 0: the last lines of its log:\n    "
        f"{_last_lines(log)}",
    )
    c.check(
        not counts.has_traceback(log),
        "no traceback",
        f"{node_id} logged a Python traceback:\n    {_last_lines(log[log.find('Traceback') :], 20)}",
    )
    others = {n: code for n, code in codes.items() if n != node_id}
    c.check(not others, "the other nodes exited 0", f"other nodes failed (exit status): {others}")
    c.check(
        run.returncode == 0 or bool(codes) or run.timed_out is not None,
        "dora run exited 0",
        f"dora run exited {run.returncode} without naming a failed node: its last lines:\n    "
        f"{_last_lines(run.output)}",
    )
    drops = counts.dora_drops(run.output)
    c.check(
        not drops,
        "dora dropped nothing",
        f"dora dropped {len(drops)} queued messages, so no count proves anything (the harness's queues are too "
        f"small): {drops[:3]}",
    )

    try:
        sent = json.loads(p.result.read_text())
    except (OSError, ValueError) as e:
        c.check(False, "", f"the hostile node's record {p.result}: expected JSON, got {type(e).__name__}: {e}")
        sent = {}
    result.sent = sent
    buckets = dict.fromkeys(BUCKETS[target], 0) | sent.get("buckets", {})

    try:
        refused = counts.refusals(log)
    except ValueError as e:
        c.check(False, "", f"{node_id}: {e}")
        refused = {}
    if refused is not None:
        expected_kinds = {
            f"{hostile_input}: {kind}" for kind in ("malformed ack", "bad message", "bad JPEG", "bad frame")
        }
        stray_kinds = {kind: n for kind, n in refused.items() if kind not in expected_kinds}
        c.check(
            not stray_kinds,
            "no refusal of a kind nobody sent",
            f"{node_id} refused inputs of kinds the hostile node never sent (an exception out of its handling, or "
            f"hostile traffic counted on the wrong input): {stray_kinds}",
        )
    result.figures["peak_rss_mb"] = counts.peak_rss_mb(log)
    _TARGETS[target](c, run, p, log, buckets, refused or {}, sent)
    return result


# -- per target: the buckets as the node counted them, and the real traffic -------------------------


def _receiver_input(c: _Checker, report: dict | None, name: str, good: int, what: str) -> None:
    stats = (report or {}).get("inputs", {}).get(name)
    if stats is None:
        c.row(f"{what} (receiver `{name}` good)", good, None, "no receiver report")
        return
    c.row(
        f"{what} (receiver `{name}` good)",
        good,
        stats["good"],
        f"missing {stats['missing']}, bad {stats['bad']}, unverified {stats['unverified']}",
    )
    c.check(
        stats["missing"] == 0 and stats["bad"] == 0 and stats["unverified"] == 0,
        f"receiver `{name}`: nothing missing, bad or unverified",
        f"receiver `{name}`: expected nothing missing, bad or unverified, got {stats['missing']} missing, "
        f"{stats['bad']} bad, {stats['unverified']} unverified; failures: {stats.get('failures', [])[:3]}",
    )


def _ack_target(c: _Checker, summary: dict | None, log: str, p: FlowParams, buckets: dict, refused: dict) -> None:
    note = "" if summary is not None else "no summary line"
    c.row(MALFORMED_ACK, buckets[MALFORMED_ACK], refused.get(f"{UNDER_TEST[c.result.target][2]}: malformed ack", 0))
    c.row(STRAY_ACK, buckets[STRAY_ACK], None if summary is None else summary["stray"], note)


def _sender(c: _Checker, run: DoraRun, p: FlowParams, log: str, buckets: dict, refused: dict, sent: dict) -> None:
    summary = counts.sender_summary(log)
    _ack_target(c, summary, log, p, buckets, refused)
    if summary is not None:
        c.row("real messages acknowledged (sender)", p.real, summary["acknowledged"])
        c.check(
            summary["retransmitted"] == 0,
            "no retransmission",
            f"sender: expected no retransmission (RETRY_S=60), got {summary['retransmitted']}: each would be "
            "acknowledged again, one more ack of nothing in flight than was sent",
        )
    report = counts.receiver_report(p.report)
    _receiver_input(c, report, "tensors", p.real, "real messages delivered")
    _throughput(c, report, "tensors", sent)


def _camera(c: _Checker, run: DoraRun, p: FlowParams, log: str, buckets: dict, refused: dict, sent: dict) -> None:
    summary = counts.camera_summary(log)
    _ack_target(c, summary, log, p, buckets, refused)
    if summary is not None:
        c.row("real frames acknowledged (camera)", p.real, summary["acknowledged"])
        c.check(
            summary["resent"] == 0 and summary["failed"] == 0,
            "no frame resent or failed",
            f"camera: expected no frame resent (RETRY_S=60) or failed, got {summary['resent']} resent, "
            f"{summary['failed']} failed",
        )
    report = counts.receiver_report(p.report)
    _receiver_input(c, report, "frames", p.real, "real frames delivered")
    _throughput(c, report, "frames", sent)


def _throughput(c: _Checker, report: dict | None, name: str, sent: dict) -> None:
    stats = (report or {}).get("inputs", {}).get(name) or {}
    c.result.figures["per_s"] = stats.get("fps")
    span = sent.get("flood_span")
    if span:
        c.result.figures["flood_span"] = span
        flood = sent.get("sent", {}).get("flood: acks of a stream nothing sent", 0)
        if flood and span["seconds"]:
            c.result.figures["flood_acks_per_s"] = round(flood / span["seconds"], 1)


def _reader(found: dict | None, missing: str) -> tuple:
    """-> (key -> the figure found, or None when nothing was found; the note a row gets then)."""
    if found is None:
        return (lambda key: None), missing
    return (lambda key: found[key]), ""


def _receiver(c: _Checker, run: DoraRun, p: FlowParams, log: str, buckets: dict, refused: dict, sent: dict) -> None:
    report = counts.receiver_report(p.report)
    stats = (report or {}).get("inputs", {}).get("tensors")
    got, note = _reader(stats, "no receiver report")
    c.row(f"{BAD_MESSAGE} (report)", buckets[BAD_MESSAGE], got("bad"), note)
    c.row(f"{BAD_MESSAGE} (refusal line)", buckets[BAD_MESSAGE], refused.get("tensors: bad message", 0))
    c.row(UNVERIFIED, buckets[UNVERIFIED], got("unverified"), note)
    c.row(DUPLICATE, buckets[DUPLICATE], got("duplicates"), note)
    c.row(REJECTED, buckets[REJECTED], got("rejected"), note)
    c.row("good messages (receiver `tensors` good)", p.real, got("good"), note)
    c.row("missing on `tensors`", 0, got("missing"), note)
    received = p.real + buckets[BAD_MESSAGE] + buckets[UNVERIFIED] + buckets[REJECTED]
    c.row("received on `tensors` (good + bad + unverified + rejected)", received, got("received"), note)
    _receiver_input(c, report, "real", p.real, "real sender's messages delivered")


def _decoder(c: _Checker, run: DoraRun, p: FlowParams, log: str, buckets: dict, refused: dict, sent: dict) -> None:
    summary = counts.decoder_summary(log)
    got, note = _reader(summary, "no summary line")
    c.row(BAD_JPEG, buckets[BAD_JPEG], got("bad"), note)
    c.row(f"{BAD_JPEG} (refusal line)", buckets[BAD_JPEG], refused.get("jpeg: bad JPEG", 0))
    c.row("JPEGs received (decoder)", p.real + buckets[BAD_JPEG], got("received"), note)
    c.row("good JPEGs decoded (decoder)", p.real, got("decoded"), note)
    # Hostile JPEGs are refused by their header, before an engine decodes them: a reason naming the
    # decode or the send means one got that far (only the reasons the decoder logged can tell).
    late = _LATE_REFUSAL.findall(log)
    c.row("hostile JPEGs refused only after decoding (of those logged)", 0, len(late), ", ".join(late[:3]))
    _receiver_input(c, counts.receiver_report(p.report), "decoded", p.real, "decoded frames delivered")


def _encoder(c: _Checker, run: DoraRun, p: FlowParams, log: str, buckets: dict, refused: dict, sent: dict) -> None:
    summary = counts.encoder_summary(log)
    got, note = _reader(summary, "no summary line")
    c.row(BAD_FRAME, buckets[BAD_FRAME], got("bad"), note)
    c.row(f"{BAD_FRAME} (refusal line)", buckets[BAD_FRAME], refused.get("frames: bad frame", 0))
    c.row("frames received (encoder)", p.real + buckets[BAD_FRAME], got("received"), note)
    c.row("good frames encoded (encoder)", p.real, got("encoded"), note)
    c.row("frames the encoder failed on", 0, got("failed"), note)
    _receiver_input(c, counts.receiver_report(p.report), "decoded", p.real, "good frames delivered, decoded")


def _sink(c: _Checker, run: DoraRun, p: FlowParams, log: str, buckets: dict, refused: dict, sent: dict) -> None:
    summary = counts.sink_summary(log)
    got, note = _reader(summary, "no summary line")
    c.row(BAD_JPEG, buckets[BAD_JPEG], got("bad"), note)
    c.row(f"{BAD_JPEG} (refusal line)", buckets[BAD_JPEG], refused.get("jpeg: bad JPEG", 0))
    accepted = None if summary is None else summary["received"] - summary["bad"]  # good ones included
    c.row(
        f"{ACCEPTED_JPEG}, hostile ones the sink has no reason to refuse",
        buckets[ACCEPTED_JPEG],
        None if accepted is None else accepted - p.real,
        note,
    )
    c.row("JPEGs received (sink)", p.real + buckets[BAD_JPEG] + buckets[ACCEPTED_JPEG], got("received"), note)
    c.row("JPEGs saved (sink, COUNT=3)", min(SINK_SAVES, p.real + buckets[ACCEPTED_JPEG]), got("saved"), note)


def _monitor(c: _Checker, run: DoraRun, p: FlowParams, log: str, buckets: dict, refused: dict, sent: dict) -> None:
    # its table is on stdout, its refusals on stderr: read apart, or one may land inside the table
    summary = counts.monitor_summary(run.log(UNDER_TEST[c.result.target][0], stream="stdout"), "tensors")
    got, note = _reader(summary, "no summary table")
    c.row(f"{BAD_MESSAGE} (monitor summary)", buckets[BAD_MESSAGE], got("bad"), note)
    c.row(f"{BAD_MESSAGE} (refusal line)", buckets[BAD_MESSAGE], refused.get("tensors: bad message", 0))
    described = None if summary is None else summary["messages"] - summary["bad"] - p.real
    c.row(f"{DESCRIBED}: hostile ones the monitor has no reason to refuse", buckets[DESCRIBED], described, note)
    received = p.real + buckets[BAD_MESSAGE] + buckets[DESCRIBED]
    c.row("messages (monitor, every one sent)", received, got("messages"), note)
    stats = (counts.receiver_report(p.report) or {}).get("inputs", {}).get("tensors")
    good, why = _reader(stats, "no receiver report")
    c.row("good messages (receiver `tensors` good, beside the monitor)", p.real, good("good"), why)


def _relay_ack(c: _Checker, run: DoraRun, p: FlowParams, log: str, buckets: dict, refused: dict, sent: dict) -> None:
    """A JPEG relay's ack input: its output's delivery figures, and its own counts of frames."""
    relay = UNDER_TEST[c.result.target][0]
    if relay == "encoder":
        stats = counts.encoder_summary(log)
        delivery, made = (stats or {}).get("jpegs"), "encoded"
    else:
        stats = counts.decoder_summary(log)
        delivery, made = (stats or {}).get("frames"), "decoded"
    _ack_target(c, delivery or None, log, p, buckets, refused)
    if stats is not None:
        c.row(f"real frames {made} ({relay})", p.real, stats[made], f"bad {stats['bad']}")
    if delivery:
        c.row(f"real frames acknowledged ({relay})", p.real, delivery["acknowledged"])
        c.check(
            delivery["resent"] == 0 and delivery["given up"] == 0,
            "nothing resent or given up",
            f"{relay}: expected nothing resent (RETRY_S=60) or given up, got {delivery['resent']} resent, "
            f"{delivery['given up']} given up",
        )
    _receiver_input(c, counts.receiver_report(p.report), "decoded", p.real, "real frames delivered")


_LATE_REFUSAL = re.compile(r"frame (hostile-\d+): (?:decode|send): ")

_TARGETS = {
    "sender": _sender,
    "camera": _camera,
    "receiver": _receiver,
    "decoder": _decoder,
    "encoder": _encoder,
    "sink": _sink,
    "monitor": _monitor,
    "encoder-ack": _relay_ack,
    "decoder-ack": _relay_ack,
}
