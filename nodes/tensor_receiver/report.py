"""Human-readable progress lines and the final table."""

from __future__ import annotations


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def progress_line(report: dict) -> str:
    parts = []
    for name, s in report["inputs"].items():
        fps = "" if s["fps"] is None else f" {s['fps']:.1f}/s"
        unverified = f" {s['unverified']} unverified" if s["unverified"] else ""
        parts.append(f"{name} {s['good']} good{unverified} {s['bad']} bad{fps} p50 {_ms(s['latency_ms']['p50'])} ms")
    return "tensor receiver: " + (" | ".join(parts) if parts else "waiting for messages")


COLUMNS = (
    "input",
    "received",
    "good",
    "unverified",
    "bad",
    "rejected",
    "missing",
    "out-of-order",
    "dup",
    "msg/s",
    "p50 ms",
    "p99 ms",
    "age p50",
)


def summary_table(report: dict) -> str:
    rows = []
    for name, s in report["inputs"].items():
        expected = "" if s["expected"] is None else f"/{s['expected']}"
        rows.append(
            (
                name,
                f"{s['received']}{expected}",
                s["good"],
                s["unverified"],
                s["bad"],
                s["rejected"],
                s["missing"],
                s["out_of_order"],
                s["duplicates"],
                "-" if s["fps"] is None else f"{s['fps']:.1f}",
                _ms(s["latency_ms"]["p50"]),
                _ms(s["latency_ms"]["p99"]),
                _ms(s["age_ms"]["p50"]),
            )
        )
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]

    def line(cells):
        return "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    status = "PASS" if report["ok"] else "FAIL"
    out = [
        f"tensor receiver summary: {status} (restored on {report['device']}, verify={report['verify']})",
        line(COLUMNS),
    ]
    out += [line(r) for r in rows]
    if any(s["age_ms"]["p50"] is not None for s in report["inputs"].values()):
        out.append(
            "  (p50/p99: from the last sender's sent_ns; age: from the frame's capture_ns, through every node on the "
            "way)"
        )
    for name, s in report["inputs"].items():
        out += [f"  {name}: {f}" for f in s["failures"][:10]]
        out += [f"  {name}: {n} unverified: {why}" for why, n in s.get("unverified_because", {}).items()]
        if s.get("streams_forgotten"):
            out.append(
                f"  {name}: {s['streams_forgotten']} streams forgotten (the least recently used, past the "
                "streams kept per input): `missing` is partial (a stream forgotten and seen again is counted afresh)"
            )
    if not rows:
        out.append("  no messages received")
    return "\n".join(out)
