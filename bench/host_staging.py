"""GPU <-> pageable host copies: tensor_codec.cuda_ipc.staging (two pinned chunk buffers, the GPU copy of
one chunk overlapping the CPU copy of the other) against a plain `copy_` between the GPU and
pageable memory, which is what a host-bytes message from (or restored onto) a GPU would do
otherwise. Measured in the same run, 256 KB to 64 MB, both directions; prints the ratio
plain / staged (above 1: staging pays) and so where TC_STAGING_MIN_BYTES (default 1 MiB)
should be. Needs CUDA.

    python bench/host_staging.py [--sizes-kb 256,1024,4096,16384,65536] [--reps 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from tensor_codec.cuda_ipc import staging  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _goals import goal, print_goals  # noqa: E402
from _results import add_json_option, save, skipped  # noqa: E402

BASELINE = "a plain copy_ between the GPU and pageable host memory (ratio: plain / staged time)"


def timed(fn, reps: int) -> float:
    """Median seconds of `fn` (each call ends with the data where it must be)."""
    fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> list | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-kb", default="256,1024,4096,16384,65536")
    parser.add_argument("--reps", type=int, default=20)
    add_json_option(parser, "host_staging")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_staging.py: no CUDA device on this machine, nothing measured (run it on a GPU machine)")
        skipped("host_staging", BASELINE, "no CUDA device on this machine", args.json)
        return None
    previous = os.environ.get(staging.ENV_MIN_BYTES)
    rows, times = [], []
    print(
        f"GPU <-> pageable host copies on {torch.cuda.get_device_name()}: plain copy_ vs staged through pinned chunks"
    )
    print(
        f"{'size':>8} | {'D2H plain':>10} {'staged':>8} {'ratio':>6} {'GB/s':>6} | {'H2D plain':>10} {'staged':>8} "
        f"{'ratio':>6} {'GB/s':>6}"
    )
    try:
        for kb in [int(s) for s in args.sizes_kb.split(",")]:
            n = kb * 1024
            gpu = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
            host = torch.empty(n, dtype=torch.uint8)  # pageable, like dora's buffers
            back = torch.empty(n, dtype=torch.uint8, device="cuda")

            def d2h():
                staging.device_to_host(gpu, host)

            def h2d():
                staging.host_to_device(host, back)

            os.environ[staging.ENV_MIN_BYTES] = "off"
            d2h_plain, h2d_plain = timed(d2h, args.reps), timed(h2d, args.reps)
            os.environ[staging.ENV_MIN_BYTES] = "0"
            d2h_staged, h2d_staged = timed(d2h, args.reps), timed(h2d, args.reps)
            assert torch.equal(back, gpu), "staged copies changed the bytes"
            rows.append((kb, d2h_plain / d2h_staged, h2d_plain / h2d_staged))
            times.append(
                {
                    "d2h_plain_ms": d2h_plain * 1e3,
                    "d2h_staged_ms": d2h_staged * 1e3,
                    "h2d_plain_ms": h2d_plain * 1e3,
                    "h2d_staged_ms": h2d_staged * 1e3,
                }
            )
            print(
                f"{kb:>6}KB | {d2h_plain * 1e3:>8.3f}ms {d2h_staged * 1e3:>6.3f}ms {d2h_plain / d2h_staged:>5.2f}x "
                f"{n / d2h_staged / 1e9:>6.1f} | "
                f"{h2d_plain * 1e3:>8.3f}ms {h2d_staged * 1e3:>6.3f}ms {h2d_plain / h2d_staged:>5.2f}x "
                f"{n / h2d_staged / 1e9:>6.1f}"
            )
    finally:
        if previous is None:
            os.environ.pop(staging.ENV_MIN_BYTES, None)
        else:
            os.environ[staging.ENV_MIN_BYTES] = previous
    print("(ratio: plain / staged time; above 1.00 staging pays at that size)")
    threshold_kb = staging.DEFAULT_MIN_BYTES // 1024
    above = [min(d2h, h2d) for kb, d2h, h2d in rows if kb >= threshold_kb]
    goals = []
    if above:
        worst = min(above)
        goals.append(
            goal(
                f"pinned staging pays from {threshold_kb // 1024} MiB (TC_STAGING_MIN_BYTES) up, both directions",
                worst,
                ">=",
                1.0,
                "x",
                f"worst ratio {worst:.2f} at or above {threshold_kb} KB",
            )
        )
        print()
        print_goals(goals)
    figures = {
        "rows": [{"kb": kb, "d2h_ratio": d2h, "h2d_ratio": h2d, **t} for (kb, d2h, h2d), t in zip(rows, times)],
        "threshold_kb": threshold_kb,
        "goals": goals,
    }
    save("host_staging", BASELINE, figures, args.json)
    return rows


if __name__ == "__main__":
    main()
