"""`make gpu-check`: the whole GPU side of the project in one command.

    python -m tools.gpu_check [--out out/gpu-check] [--budget 450] [--only jpeg]

Runs, in order: an environment report (versions, device, driver, allocator settings, the
optional engines), every gpu-marked test (junit XML; on pytest-xdist workers where the
interpreter has it), the default pipeline with every node on CUDA, the two-machine pipeline with
CUDA tensors, and the GPU benchmarks (CUDA IPC, host copies, JPEG), each within what is left
of the time budget, less what the parts after it need. Writes report.md, report.json (with the
table of the optional engines: installed, ran or not, and why), gpu-tests.xml and gpu-check.log
into --out (nothing else: a GPU host hands back only a few files). Exits 1 when a part fails,
130 when interrupted (the report then says how far it got). Without CUDA it says so in one line,
checks what the CPU can, marks the GPU parts skipped and exits 0. TorchCodec is expected (the
GPU hosts get it from ../shared/gpu/wheels.sh): where it is missing the report says so first.

`--only jpeg` (or GPU_CHECK_ONLY=jpeg in the environment, for ../shared/gpu/first-run.sh) runs the
environment report, the JPEG engines' gpu tests and the JPEG benchmark only: none needs dora, so a
device call can carry nvImageCodec's wheels instead of dora's (issue 34).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import engines, parts
from .report import FAIL, Part, Report
from .runner import Context

# ../shared/gpu/first-run.sh gives the check 300 s (GPU_CHECK_BUDGET) of a ~5-minute device call,
# after an install of ~40 s; `make gpu-check` the same.
DEFAULT_BUDGET_S = 300


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out/gpu-check"))
    parser.add_argument(
        "--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds for the whole check (default %(default)s)"
    )
    parser.add_argument(
        "--only",
        choices=("jpeg",),
        default=os.environ.get("GPU_CHECK_ONLY") or None,
        help="jpeg: the JPEG engines' gpu tests and benchmark only, without dora (default: $GPU_CHECK_ONLY, else all)",
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("report.md", "report.json", "gpu-tests.xml", "gpu-check.log"):
        (out / stale).unlink(missing_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)  # as Ctrl-C: stop the running part, write the report
    # Set explicitly: started in the background by a non-interactive shell (`make gpu-check &` in
    # a script), a process inherits SIGINT ignored, and Python then leaves it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    report = Report(out, args.budget)
    work = Path(tempfile.mkdtemp(prefix="tc-gpu-check-"))
    with open(out / "gpu-check.log", "w") as log:
        ctx = Context(out, work, log, args.budget)
        ctx.only = args.only
        if args.only == "jpeg":
            ctx.test_paths = list(parts.JPEG_TESTS)
        try:
            run_all(ctx, report)
        except KeyboardInterrupt:
            report.add(
                Part(
                    "interrupted", FAIL, 0.0, f"stopped after {time.time() - report.started:.0f} s; the parts above ran"
                )
            )
            print(f"gpu-check: interrupted; report: {out / 'report.md'}", flush=True)
            return 130
        finally:
            report.write()
            shutil.rmtree(work, ignore_errors=True)
    print(report.as_markdown(), flush=True)
    print(f"gpu-check: {'PASS' if report.ok else 'FAIL'}; report: {out / 'report.md'}", flush=True)
    return 0 if report.ok else 1


def run_all(ctx: Context, report: Report) -> None:
    try:
        part, _, info = parts.environment(ctx)
    except Exception as e:
        part, info = (
            Part(
                "environment",
                FAIL,
                0.0,
                f"the check itself broke: {type(e).__name__}: {e}",
                tail=traceback.format_exc(limit=6),
            ),
            {},
        )
    report.environment = ctx.environment = info
    report.cuda = ctx.cuda = bool(info.get("cuda"))
    report.warnings = engines.missing_expected(info.get("optional") or {}) if info else []
    _engines(ctx, report)
    report.add(part)
    _say(part)
    if not ctx.cuda:
        print(
            f"gpu-check: no CUDA device on this machine (torch {info.get('torch', '?')}): the GPU parts are skipped, "
            "checking what the CPU can",
            flush=True,
        )
    for warning in report.warnings:
        print(f"gpu-check: warning: {warning}", flush=True)
    steps = parts.JPEG_PARTS if ctx.only == "jpeg" else parts.PARTS
    for i, step in enumerate(steps):
        # With CUDA each part leaves the parts after it their floors (the gpu tests could take it all).
        ctx.reserve = sum(later.floor for later in steps[i + 1 :]) if ctx.cuda else 0.0
        if ctx.remaining() < 10:
            part, goals = Part(step.title, FAIL, 0.0, f"not run: the {report.budget_s:.0f} s budget was spent"), []
        else:
            part, goals = guarded(step, ctx)
        _engines(ctx, report)
        report.add(part, goals)
        _say(part)


def _engines(ctx: Context, report: Report) -> None:
    report.engines = engines.table(ctx.environment.get("optional") or {}, ctx.cuda, ctx.cases, ctx.workers)


def guarded(step, ctx: Context) -> tuple[Part, list]:
    """A part that breaks (a figure missing from a benchmark's JSON, an output that is not what
    it should be) is a failed part with its traceback, and the check goes on."""
    started = time.monotonic()
    try:
        return step(ctx)
    except Exception as e:
        return Part(
            step.title,
            FAIL,
            time.monotonic() - started,
            f"the check itself broke: {type(e).__name__}: {e}",
            tail=traceback.format_exc(limit=6),
        ), []


def _say(part: Part) -> None:
    print(f"gpu-check: [{part.status}] {part.name}: {part.summary} ({part.seconds:.1f} s)", flush=True)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
