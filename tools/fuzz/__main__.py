"""`make fuzz`: the structure-aware fuzzer of tensor_codec's decoder (docs/fuzzing.md).

    python -m tools.fuzz [--cases N] [--seed S] [--start I] [--workers W] [--timeout S]
                         [--alone-timeout S] [--batch B] [--max-reproducers M] [--out DIR]
                         [--json] [--quiet]
    python -m tools.fuzz --replay FILE [--json]
    python -m tools.fuzz --nodes [...]    the node-level mode: python -m tools.fuzz_nodes --help

Runs cases start .. start+N-1 of run `seed` in worker processes and prints a table of outcomes
(by outcome, by mutator, by seed message family). A crash, hang or any exception other than
DecodeError is written as a reproducer, DIR/repro-<seed>-<index>.json (a case past --timeout is
run again alone first, and is a hang only if it runs past --alone-timeout there too). Exits 0 when every case
ended in ok or DecodeError, 1 otherwise, 130 when interrupted. ``--replay FILE`` decodes one
reproducer in this process and prints its outcome (exit 0 for ok / DecodeError).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DEFAULT_CASES = 100_000
INJECTED = ("abort", "segv", "exit", "hang", "raise", "stall")  # the faults worker.py can inject


def _inject(values: list[str]) -> dict:
    """--inject KIND:INDEX (repeatable): the harness's self-test hooks (tools/fuzz/worker.py)."""
    out: dict = {}
    for item in values:
        kind, _, index = item.partition(":")
        if kind not in INJECTED or not index.isdigit():
            raise SystemExit(f"--inject: expected KIND:INDEX with KIND in {', '.join(INJECTED)}; got {item!r}")
        out.setdefault(kind, []).append(int(index))
    return out


def replay(path: Path, as_json: bool) -> int:
    from .runner import EXPECTED, load_reproducer

    record = load_reproducer(path)
    from .execute import run_case  # imports torch and tensor_codec

    result = run_case(record["case"], record["index"])
    if as_json:
        print(
            json.dumps(
                {
                    "file": str(path),
                    "recorded": record["outcome"],
                    "outcome": result.outcome,
                    "stage": result.stage,
                    "detail": result.detail,
                    "traceback": result.traceback,
                }
            )
        )
    else:
        print(
            f"replay {path}: seed {record['seed']} case {record['index']} ({record['seed_message']}; "
            f"{', '.join(record['mutators'] or [])})"
        )
        print(f"recorded: {record['outcome']}  {record['detail'][:300]}")
        print(f"now:      {result.outcome}  {(result.stage + ': ') if result.stage else ''}{result.detail[:300]}")
        if result.traceback:
            print(result.traceback, end="")
    return 0 if result.outcome in EXPECTED else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--nodes" in argv:  # the node-level mode (tools/fuzz_nodes): its own options
        from tools.fuzz_nodes.__main__ import main as nodes_main

        return nodes_main([a for a in argv if a != "--nodes"])
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES, help="cases to run (default %(default)s)")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="run seed: case i of seed s is always the same message (default %(default)s)",
    )
    parser.add_argument("--start", type=int, default=0, help="first case index (default %(default)s)")
    parser.add_argument(
        "--workers", type=int, default=0, help=f"worker processes (default: CPU count, {os.cpu_count()} here)"
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds a case may run before it is a hang (default %(default)s)"
    )
    parser.add_argument(
        "--alone-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds a case that ran past --timeout may run again alone (a fresh worker, once the others are done) "
        "before it is a hang (default: 3 x --timeout)",
    )
    parser.add_argument(
        "--batch", type=int, default=200, help="cases handed to a worker at a time (default %(default)s)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("out/fuzz"), help="reproducers and summary-<seed>.json (default %(default)s)"
    )
    parser.add_argument(
        "--max-reproducers",
        type=int,
        default=50,
        help="reproducer files per outcome; more are only counted (default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of tables")
    parser.add_argument(
        "--replay", type=Path, metavar="FILE", help="decode one reproducer in this process and print the outcome"
    )
    parser.add_argument("--inject", action="append", default=[], metavar="KIND:INDEX", help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.replay, args.json)
    if args.cases < 1 or args.batch < 1 or args.timeout <= 0 or args.workers < 0 or args.start < 0:
        parser.error("--cases and --batch must be >= 1, --timeout > 0, --workers and --start >= 0")
    if args.alone_timeout is not None and args.alone_timeout <= 0:
        parser.error(f"--alone-timeout: expected seconds > 0, got {args.alone_timeout:g}")

    from .runner import Config, format_summary, run

    config = Config(
        cases=args.cases,
        seed=args.seed,
        start=args.start,
        workers=args.workers,
        timeout=args.timeout,
        alone_timeout=args.alone_timeout,
        out=args.out,
        batch=args.batch,
        inject=_inject(args.inject),
        progress=not args.quiet,
        max_reproducers=args.max_reproducers,
    )
    summary = run(config)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=1))
    else:
        print(format_summary(summary, max_reproducers=args.max_reproducers))
        print(f"summary: {args.out / f'summary-{args.seed}.json'}")
    if summary.interrupted:
        return 130
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
