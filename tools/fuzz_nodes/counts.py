"""What the nodes said they counted, read from their logs and the receiver's report: the figures
the runner holds against what the hostile node sent. Each parser names the line it reads, and
returns None when the node did not write it (a node that died says nothing: that is a finding,
not a zero)."""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = [
    "refusals",
    "peak_rss_mb",
    "stray_acks",
    "sender_summary",
    "camera_summary",
    "decoder_summary",
    "encoder_summary",
    "sink_summary",
    "monitor_summary",
    "receiver_report",
    "has_traceback",
    "dora_drops",
]

# loop.run: "<node>: WARNING refused N inputs: <kind> n, <kind> n; peak RSS M MB"
# (hostile.Refusals.summary, then what the node's memory peaked at)
_REFUSED = re.compile(r"WARNING refused (\d+) inputs: ([^;\n]*)", re.MULTILINE)
_PEAK_RSS = re.compile(r"WARNING refused \d+ inputs: [^\n]*; peak RSS (\d+(?:\.\d+)?) MB")
_KIND = re.compile(r"(.+?) (\d+)(?:, |$)")
# tc-tensor-sender's summary line (printed on stdout), and the camera's (logged)
_SENDER = re.compile(r"tensor sender: (\d+) messages sent(.*)$", re.MULTILINE)
_CAMERA = re.compile(r"INFO sent (\d+) frames, (\d+) failed(?: \((.*)\))?$", re.MULTILINE)
_DECODER = re.compile(r"INFO received (\d+), decoded (\d+), bad (\d+)(?:; frames (.*))?$", re.MULTILINE)
_SINK = re.compile(r"INFO received (\d+), saved (\d+)(?: to [^,\n]*)?, bad (\d+)", re.MULTILINE)
_ENCODER = re.compile(
    r"INFO received (\d+), encoded (\d+), bad (\d+), failed (\d+)[^;\n]*(?:; JPEGs (.*))?$", re.MULTILINE
)
_STRAY = re.compile(r"(\d+) acks of nothing in flight")
# dora dropping a message: the harness's queues were too small, so counts prove nothing
_DROPS = re.compile(r"(Discarding event for input|hit hard cap)[^\n]*")


def refusals(log: str) -> dict[str, int] | None:
    """The node's refusal summary: kind -> count ({} when the node refused nothing and so wrote
    no line; the last line when there are several)."""
    found = _REFUSED.findall(log)
    if not found:
        return {}
    total, kinds = found[-1]
    counts = {kind: int(n) for kind, n in _KIND.findall(kinds)}
    if sum(counts.values()) != int(total):
        raise ValueError(f"refusal line: expected kinds adding up to {total}, got {counts} from {kinds!r}")
    return counts


def peak_rss_mb(log: str) -> float | None:
    """The peak RSS a node that refused inputs gives beside their count (None: not said)."""
    found = _PEAK_RSS.findall(log)
    return float(found[-1]) if found else None


def stray_acks(summary: str) -> int:
    """`N acks of nothing in flight` in a producer's summary (absent: none)."""
    found = _STRAY.search(summary)
    return int(found.group(1)) if found else 0


def _figures(text: str) -> dict[str, int]:
    """ "60 acknowledged, 0 not acknowledged, 0 retransmitted" -> {"acknowledged": 60, ...}."""
    out = {}
    for part in text.split(","):
        words = part.strip().split(" ", 1)
        if len(words) == 2 and words[0].isdigit():
            out[words[1]] = int(words[0])
    return out


def sender_summary(log: str) -> dict[str, int] | None:
    """tc-tensor-sender: {"sent", "acknowledged", "not acknowledged", "retransmitted", "stray"}."""
    found = _SENDER.findall(log)
    if not found:
        return None
    sent, rest = found[-1]
    figures = _figures(rest)
    return {
        "sent": int(sent),
        "acknowledged": figures.get("acknowledged", 0),
        "not acknowledged": figures.get("not acknowledged", 0),
        "retransmitted": figures.get("retransmitted", 0),
        "stray": stray_acks(rest),
    }


def camera_summary(log: str) -> dict[str, int] | None:
    """tc-camera-source: {"sent", "failed", "acknowledged", "resent", "given up", "stray"}."""
    found = _CAMERA.findall(log)
    if not found:
        return None
    sent, failed, delivery = found[-1]
    figures = _figures(delivery)
    return {
        "sent": int(sent),
        "failed": int(failed),
        "acknowledged": figures.get("acknowledged", 0),
        "resent": figures.get("resent", 0),
        "given up": figures.get("given up", 0),
        "stray": stray_acks(delivery),
    }


def _outbox(text: str) -> dict[str, int]:
    """delivery.Outbox.summary: "S sent, A acknowledged, R resent, G given up[, ...][, N acks of
    nothing in flight]" ({} when the output is not acknowledged and the node said nothing)."""
    if not text:
        return {}
    figures = _figures(text)
    return {
        "sent": figures.get("sent", 0),
        "acknowledged": figures.get("acknowledged", 0),
        "resent": figures.get("resent", 0),
        "given up": figures.get("given up", 0),
        "stray": stray_acks(text),
    }


def decoder_summary(log: str) -> dict[str, int] | None:
    """tc-jpeg-decoder: {"received", "decoded", "bad"} and, with acks, its frames' delivery
    (`_outbox`'s figures under "frames")."""
    found = _DECODER.findall(log)
    if not found:
        return None
    received, decoded, bad, frames = found[-1]
    return {"received": int(received), "decoded": int(decoded), "bad": int(bad), "frames": _outbox(frames)}


def sink_summary(log: str) -> dict[str, int] | None:
    """tc-jpeg-sink: {"received", "saved", "bad"}."""
    found = _SINK.findall(log)
    if not found:
        return None
    received, saved, bad = found[-1]
    return {"received": int(received), "saved": int(saved), "bad": int(bad)}


def encoder_summary(log: str) -> dict | None:
    """tc-jpeg-encoder: {"received", "encoded", "bad", "failed"} and, with acks, its JPEGs'
    delivery (under "jpegs")."""
    found = _ENCODER.findall(log)
    if not found:
        return None
    received, encoded, bad, failed, jpegs = found[-1]
    return {
        "received": int(received),
        "encoded": int(encoded),
        "bad": int(bad),
        "failed": int(failed),
        "jpegs": _outbox(jpegs),
    }


# tc-monitor's summary table: "monitor summary: N inputs", the column names, then a row per input
# beginning "<input> <messages> <bad>"
_MONITOR = re.compile(r"^monitor summary: \d+ inputs\n[^\n]*\n((?:\S+ +\d+ +\d+ [^\n]*\n?)+)", re.MULTILINE)


def monitor_summary(log: str, input_id: str) -> dict[str, int] | None:
    """tc-monitor: {"messages", "bad"} of one input (its summary table's row)."""
    found = _MONITOR.findall(log)
    if not found:
        return None
    for row in found[-1].splitlines():
        cells = row.split()
        if cells and cells[0] == input_id:
            return {"messages": int(cells[1]), "bad": int(cells[2])}
    return None


def receiver_report(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def has_traceback(log: str) -> bool:
    return "Traceback (most recent call last)" in log


def dora_drops(output: str) -> list[str]:
    """dora's lines saying it dropped a queued message."""
    return [m.group(0) for m in _DROPS.finditer(output)]
