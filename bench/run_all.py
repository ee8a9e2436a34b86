"""Run every benchmark and print its ratios (`make bench`).

    small_message.py   encode + decode of a 1 KB BoundingBoxes (goal < 50 us)
    decode_scaling.py  decoding 64 MB vs 1 KB (goal within 2x: receiving is O(1))
    header_cost.py     the worst headers within the limits, and just past them (goal: each handled
                       in at most 50 ms and 32 MB; issue 14)
    padding_check.py   refusing non-zero padding between leaves vs not checking it (issue 14)
    dora_latency.py    end-to-end latency through real dora dataflows against plain
                       send_output_raw, t.contiguous() + send_output_raw and the pa.array pattern
    jpeg_fps.py        JPEG encoding at 1080p and 4K: every engine (CPU, and CUDA when present) and the
                       encoder node's path, against PIL (issue 5)
    cuda_ipc.py        CUDA IPC through dora against .cpu() -> dora -> .cuda() (issue 4; GPU only)
    cross_daemon.py    two daemons (machines A, B): cross-daemon vs same-daemon latency and throughput,
                       1 to 64 MB, on loopback and on the host's address (issue 6; about 2.5 min)
    host_staging.py    GPU<->host copies through pinned chunks vs plain copy_ (issue 6; GPU only)
    camera_fps.py      the synthetic camera at 1920x1080, 60 fps into the receiver: fps, drops, p50/p99
                       latency against the same frames sent as a flat pa.array (about 95 s)

Each writes its results to out/bench/<script>.json (bench/_results.py; a GPU script without CUDA
writes that it was skipped); `make plots` draws them into out/bench/img/ (bench/plots.py).
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import camera_fps  # noqa: E402
import cross_daemon  # noqa: E402
import cuda_ipc  # noqa: E402
import decode_scaling  # noqa: E402
import header_cost  # noqa: E402
import padding_check  # noqa: E402
import host_staging  # noqa: E402
import dora_latency  # noqa: E402
import jpeg_fps  # noqa: E402
import small_message  # noqa: E402
from _results import RESULTS_DIR, ROOT  # noqa: E402


def main() -> None:
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, python {platform.python_version()}, torch {torch.__version__}\n")
    small_message.main([])
    print()
    decode_scaling.main([])
    print()
    header_cost.main([])
    print()
    padding_check.main([])
    print()
    dora_latency.main(sys.argv[1:])
    print()
    jpeg_fps.main([])
    print()
    cuda_ipc.main([])
    print()
    cross_daemon.main([])
    print()
    host_staging.main([])
    print()
    camera_fps.main([])
    print(f"\nresults in {RESULTS_DIR.relative_to(ROOT)}/; `make plots` draws them")


if __name__ == "__main__":
    main()
