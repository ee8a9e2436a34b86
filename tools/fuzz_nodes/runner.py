"""One node-level campaign: for each target, its dataflow written to a folder of its own, run with
`dora run` under a time limit, and held to what the hostile node sent (checks.py). The sender is
run twice, clean (no hostile input) then hostile, for the throughput with and without the flood.
Folders of targets that passed are removed; those of failures are kept and named."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .checks import BUCKETS, TargetResult, check_run
from .dora_run import run_flow
from .flows import FlowParams, write_flow
from .schedule import FLOOD_TARGETS, TARGETS

__all__ = ["Options", "Campaign", "run", "DEFAULT_REAL", "FLOOD_GOAL"]

# The sender under a sustained flood of junk acks keeps at least this share of its clean
# throughput (issue 60); a figure the table judges, not a check that fails the campaign: it is a
# speed, and speeds are judged, not asserted (a loaded machine must not fail a correctness run).
FLOOD_GOAL = 0.5

# Real messages through each target by default: enough for a throughput figure over the flood's
# span (the sender), a few hundred hostile inputs between them, a few seconds a run on 2 cores.
DEFAULT_REAL = {
    "sender": 4000,
    "camera": 200,
    "receiver": 60,
    "decoder": 40,
    "encoder": 40,
    "sink": 40,
    "monitor": 60,
    "encoder-ack": 60,
    "decoder-ack": 60,
}


@dataclass
class Options:
    seed: int = 0
    targets: tuple[str, ...] = TARGETS
    hostile: int = 200
    flood_rate: int = 20_000  # flood acks per second into the ack targets, over the flood's span
    real: int | None = None  # None: DEFAULT_REAL per target
    timeout: float = 180.0
    baseline: bool = True  # the sender's clean run, for the throughput without the flood
    miscount: dict[str, str] = field(default_factory=dict)  # target -> bucket the hostile node over-claims
    progress: bool = True
    keep: bool = False  # keep every run's folder (else only those of failures)


@dataclass
class Campaign:
    options: Options
    results: list[TargetResult] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)  # folders of failed runs

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    def result(self, label: str) -> TargetResult | None:
        return next((r for r in self.results if r.label == label), None)

    def throughput(self) -> dict | None:
        """The sender's messages/s clean and under the ack flood, when both ran."""
        clean, hostile = self.result("sender (clean)"), self.result("sender")
        if clean is None or hostile is None:
            return None

        def side(r: TargetResult) -> dict:
            span = r.figures.get("flood_span") or {}
            return {
                "per_s": r.figures.get("per_s"),
                "span_per_s": span.get("per_s"),
                "span": [span.get("from"), span.get("to")],
                "flood_acks_per_s": r.figures.get("flood_acks_per_s"),
                "hostile": r.params.hostile,
                "flood_rate": r.params.flood_rate,
                "real": r.params.real,
            }

        out = {"clean": side(clean), "flood": side(hostile)}
        for key in ("per_s", "span_per_s"):
            a, b = out["clean"][key], out["flood"][key]
            out[f"ratio_{key}"] = round(b / a, 3) if a and b else None
        return out

    def as_dict(self) -> dict:
        o = self.options
        return {
            "ok": self.ok,
            "seed": o.seed,
            "targets": list(o.targets),
            "hostile": o.hostile,
            "flood_rate": o.flood_rate,
            "results": [r.as_dict() for r in self.results],
            "throughput": self.throughput(),
            "kept": [str(k) for k in self.kept],
        }


def _run_one(target: str, label: str, params: FlowParams, timeout: float, progress: bool) -> TargetResult:
    if progress:
        print(f"fuzz-nodes: {label}: running ({params.workdir})", flush=True)
    run = run_flow(write_flow(target, params), timeout)
    return check_run(target, label, run, params)


def run(options: Options, workroot: Path | None = None) -> Campaign:
    unknown = [t for t in options.targets if t not in TARGETS]
    if unknown:
        raise ValueError(f"targets: expected some of {', '.join(TARGETS)}, got {', '.join(unknown)}")
    for target, bucket in options.miscount.items():
        if bucket not in BUCKETS.get(target, ()):
            known = ", ".join(BUCKETS.get(target, ()))
            raise ValueError(f"miscount: expected a bucket of {target} ({known}), got {bucket!r}")
    if workroot is not None:
        workroot.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="tc-fuzz-nodes-", dir=workroot))
    campaign = Campaign(options)
    for target in options.targets:
        real = options.real or DEFAULT_REAL[target]
        runs = []
        if target == "sender" and options.baseline:
            runs.append(("sender (clean)", 0, 0))
        runs.append((target, options.hostile, options.flood_rate if target in FLOOD_TARGETS else 0))
        for label, hostile, flood_rate in runs:
            params = FlowParams(
                seed=options.seed,
                hostile=hostile,
                flood_rate=flood_rate,
                real=real,
                workdir=root / label.replace(" ", "-").replace("(", "").replace(")", ""),
                miscount=options.miscount.get(target, "") if hostile else "",
            )
            result = _run_one(target, label, params, options.timeout, options.progress)
            campaign.results.append(result)
            if result.ok and not options.keep:
                shutil.rmtree(params.workdir, ignore_errors=True)
            else:
                campaign.kept.append(params.workdir)
    if not campaign.kept:
        shutil.rmtree(root, ignore_errors=True)
    return campaign
