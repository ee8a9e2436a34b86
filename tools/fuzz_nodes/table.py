"""The campaign as text: a table per target (sent, counted, verdict per figure), the checks, the
categories sent, the sender's throughput with and without the flood, and the verdict."""

from __future__ import annotations

from .checks import TargetResult
from .flows import UNDER_TEST
from .runner import FLOOD_GOAL, Campaign
from .schedule import FLOOD_TARGETS


def _target(r: TargetResult) -> list[str]:
    node_id, script, hostile_input = UNDER_TEST[r.target]
    p = r.params
    what = f"{p.hostile} hostile inputs" + (f" + a flood of {p.flood_rate} acks/s" if p.flood_rate else "")
    head = (
        f"{r.label}: {script} `{hostile_input}`, {what}, {p.real} real messages: "
        f"{'PASS' if r.ok else 'FAIL'} in {r.wall_s:.1f} s"
    )
    if r.figures.get("peak_rss_mb"):
        head += f", {node_id}'s peak RSS {r.figures['peak_rss_mb']:.0f} MB"
    width = max([len("what")] + [len(row.name) for row in r.rows])
    lines = [head, f"  {'what':<{width}}  {'sent':>7}  {'counted':>7}  verdict"]
    for row in r.rows:
        sent = "-" if row.sent is None else str(row.sent)
        counted = "-" if row.counted is None else str(row.counted)
        verdict = "ok" if row.ok else "MISMATCH"
        note = f"  ({row.note})" if row.note else ""
        lines.append(f"  {row.name:<{width}}  {sent:>7}  {counted:>7}  {verdict}{note}")
    if r.passed_checks:
        lines.append(f"  checks held: {'; '.join(r.passed_checks)}")
    for problem in r.problems:
        lines.append(f"  FAILED: {problem}")
    categories = r.sent.get("sent") or {}
    if categories:
        lines.append("  categories sent: " + ", ".join(f"{name} {n}" for name, n in sorted(categories.items())))
    if r.sent.get("miscount"):
        lines.append(f"  (self-test: the hostile node claimed one more `{r.sent['miscount']}` than it sent)")
    return lines


def _rate(value) -> str:
    return "-" if value is None else f"{value:.0f} msg/s"


def _throughput(t: dict) -> list[str]:
    clean, flood = t["clean"], t["flood"]
    span = flood["span"]
    hostile = f"{flood['hostile']} hostile + {flood['flood_rate']} flood acks/s:"
    clean_label = "clean:"
    width = max(len(hostile), len(clean_label))
    taken = f" ({flood['flood_acks_per_s']:.0f} flood acks/s taken)" if flood["flood_acks_per_s"] else ""
    lines = [
        f"tc-tensor-sender throughput, {flood['real']} messages of 4 KB (over the run: the receiver's figure; over "
        f"messages {span[0]}..{span[1]}, the flood's span: the hostile acker's):",
        f"  {clean_label:<{width}} {_rate(clean['per_s']):>12} over the run, {_rate(clean['span_per_s']):>12} over "
        "the span",
        f"  {hostile:<{width}} {_rate(flood['per_s']):>12} over the run, {_rate(flood['span_per_s']):>12} over the "
        f"span{taken}",
    ]
    ratios = [f"{name} {t[key]:.2f}x" for name, key in (("run", "ratio_per_s"), ("span", "ratio_span_per_s")) if t[key]]
    if ratios:
        lines.append(f"  flood / clean: {', '.join(ratios)}")
    if t["ratio_span_per_s"]:
        met = "met" if t["ratio_span_per_s"] >= FLOOD_GOAL else "NOT met"
        lines.append(f"  goal: at least {FLOOD_GOAL}x of the clean rate over the span under the flood: {met}")
    return lines


def format_campaign(c: Campaign) -> str:
    o = c.options
    flooded = [t for t in o.targets if t in FLOOD_TARGETS]
    flood = f", a flood of {o.flood_rate} acks/s into {', '.join(flooded)}" if flooded and o.flood_rate else ""
    lines = [
        f"node-level fuzzing: seed {o.seed}, targets {', '.join(o.targets)}, {o.hostile} hostile inputs per "
        f"target{flood}",
        "",
    ]
    for r in c.results:
        lines += _target(r) + [""]
    throughput = c.throughput()
    if throughput:
        lines += _throughput(throughput) + [""]
    for path in c.kept:
        lines.append(f"kept for a look: {path} (dataflow.yml, dora-output.log, out/*/log_*.jsonl, hostile.json)")
    failed = [r.label for r in c.results if not r.ok]
    lines.append(
        "PASS: every count matched what was sent, every node ended and delivered its real traffic"
        if c.ok
        else f"FAIL: {', '.join(failed) or 'nothing ran'}"
    )
    return "\n".join(lines)
