"""Where a benchmark's results go and the envelope every one of them carries, so that `make plots`
(bench/plots.py) can say on each figure which machine ran it, when, and what its ratios are
against. One file per benchmark: out/bench/<name>.json under the repository root (whatever the
current directory), or the path given with --json (what `make gpu-check` uses).

The envelope's fields sit at the top level beside the benchmark's own figures (`goals` among
them), as `make gpu-check` reads them:

    benchmark  the script's name (small_message, ...)
    machine    platform, CPU count and model, GPU name or null, python and torch versions
    date       when the results were written, ISO 8601 in UTC
    baseline   what each ratio of the benchmark is against, in words
    skipped    only when nothing was measured (a GPU benchmark without CUDA): why
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "out" / "bench"
ENVELOPE = ("benchmark", "machine", "date", "baseline")


def add_json_option(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"where to write the results (default: out/bench/{name}.json under the repository root)",
    )


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may use, not what the host has
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def python_speed_us() -> float:
    """How long ``sum(range(1000))`` takes in this interpreter now, in microseconds (the best of 5
    runs of 2,000 calls), measured as the results are written, just after the run: the machine's
    speed at the time. Shared machines are not
    always quiet, and a loaded one slows every Python step alike: on the 2-core development
    machine this read 16 to 26 us on 2026-11-28, when one revision's encode and decode of a 1 KB
    message (bench/small_message.py) took 50.9 us, against 18.0 on a quieter day. Goals in
    microseconds are judged by runs that read low."""
    import timeit

    return min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6


def machine() -> dict:
    """The machine in a few fields: enough to tell two runs' machines apart on a plot, and how
    fast it ran Python at the time (`python_speed_us`)."""
    import torch  # every benchmark has it loaded already; imported here so this module stays light

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {
        "platform": platform.platform(),
        "system": f"{platform.system()} {platform.machine()}",
        "cpus": _cpus(),
        "cpu_model": _cpu_model(),
        "gpu": gpu,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "python_speed_us": python_speed_us(),
    }


def envelope(benchmark: str, baseline: str, figures: dict) -> dict:
    """`figures` with the envelope in front (the envelope's names win: they mean one thing)."""
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return {
        "benchmark": benchmark,
        "machine": machine(),
        "date": now,
        "baseline": baseline,
        **{k: v for k, v in figures.items() if k not in ENVELOPE},
    }


def save(benchmark: str, baseline: str, figures: dict, path: Path | None = None) -> dict:
    """Writes the figures with their envelope to `path` (default out/bench/<benchmark>.json) and
    returns what it wrote."""
    result = envelope(benchmark, baseline, figures)
    target = Path(path) if path is not None else RESULTS_DIR / f"{benchmark}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=1, default=_plain))
    speed = result["machine"]["python_speed_us"]
    print(f"  results: {_shown(target)} (this machine now: sum(range(1000)) in {speed:.1f} us of Python)")
    return result


def skipped(benchmark: str, baseline: str, why: str, path: Path | None = None) -> dict:
    """A benchmark that measured nothing says why in its file, so that plots list it as skipped
    (and an older run's figures from another machine do not stay behind under its name)."""
    return save(benchmark, baseline, {"skipped": why}, path)


def _plain(value):
    """What json cannot write by itself: dataclass-like objects (limits) and paths."""
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "__dict__"):
        return vars(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
