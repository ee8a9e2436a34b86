"""`make fuzz-nodes`: hostile messages and acks into the project's nodes through real dora
dataflows, each node's counts held to what was sent (docs/fuzzing.md, "Node-level fuzzing").

    python -m tools.fuzz_nodes [--seed S] [--targets T,...] [--hostile N] [--flood-rate R] [--real M]
                               [--timeout S] [--no-baseline] [--keep] [--workdir DIR] [--out DIR]
                               [--json]
    python -m tools.fuzz --nodes [the same options]

Prints a table per target (sent, counted, verdict) and the sender's throughput with and without
the ack flood; writes DIR/nodes-summary-<seed>.json. Exits 0 when every count matched and every
check held, 1 otherwise, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .runner import DEFAULT_REAL
from .schedule import ACK_TARGETS, TARGETS


def _targets(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in names if t not in TARGETS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(TARGETS)}, got {text!r}")
    return names


def _miscount(values: list[str]) -> dict[str, str]:
    """--miscount TARGET:BUCKET (repeatable): the runner's self-test (a claim no node can match)."""
    out = {}
    for item in values:
        target, _, bucket = item.partition(":")
        if target not in TARGETS or not bucket:
            known = ", ".join(TARGETS)
            raise SystemExit(f"--miscount: expected TARGET:BUCKET with TARGET one of {known}, got {item!r}")
        out[target] = bucket
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz_nodes", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seed", type=int, default=0, help="run seed: the same seed sends the same inputs (default %(default)s)"
    )
    parser.add_argument(
        "--targets",
        type=_targets,
        default=TARGETS,
        help=f"comma-separated, some of {','.join(TARGETS)} (default: all)",
    )
    parser.add_argument("--hostile", type=int, default=200, help="hostile inputs per target (default %(default)s)")
    parser.add_argument(
        "--flood-rate",
        type=int,
        default=20_000,
        help=f"flood acks per second into the ack targets, {', '.join(ACK_TARGETS)}, sustained over the middle "
        "half of the run (default %(default)s; 0: no flood)",
    )
    parser.add_argument(
        "--real",
        type=int,
        default=None,
        help="real messages through each target (default: "
        + ", ".join(f"{target} {n}" for target, n in DEFAULT_REAL.items())
        + ")",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds one dataflow may run before it is a hang (default %(default)s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep every run's folder (default: only failures')")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="where the runs' folders are made (default: the system's temp)"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the sender's clean run (no throughput comparison)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("out/fuzz"), help="where nodes-summary-<seed>.json goes (default %(default)s)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of tables")
    parser.add_argument("--miscount", action="append", default=[], metavar="TARGET:BUCKET", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hostile < 0 or args.flood_rate < 0 or (args.real is not None and args.real < 12) or args.timeout <= 0:
        parser.error(
            "--hostile and --flood-rate must be >= 0, --real >= 12 (past the producers' window), --timeout > 0"
        )

    from .runner import Options, run
    from .table import format_campaign

    options = Options(
        seed=args.seed,
        targets=args.targets,
        hostile=args.hostile,
        flood_rate=args.flood_rate,
        real=args.real,
        timeout=args.timeout,
        baseline=not args.no_baseline,
        miscount=_miscount(args.miscount),
        progress=not args.json,
        keep=args.keep,
    )
    try:
        campaign = run(options, args.workdir)
    except KeyboardInterrupt:
        print("fuzz-nodes: interrupted", file=sys.stderr)
        return 130
    summary = campaign.as_dict()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"nodes-summary-{args.seed}.json"
    path.write_text(json.dumps(summary, indent=1))
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(format_campaign(campaign))
        print(f"summary: {path}")
    return 0 if campaign.ok else 1


if __name__ == "__main__":
    sys.exit(main())
