"""Run every benchmark and print its ratios (`make bench`).

    small_message.py   encode + decode of a 1 KB BoundingBoxes (goals, issue 18: header seen before
                       < 15 us, never seen < 40 us)
    decode_scaling.py  decoding 64 MB vs 1 KB (goal within 2x: receiving is O(1))
    header_cost.py     the worst headers within the limits, and just past them (goal: each handled
                       in at most 50 ms and 32 MB; issue 14)
    padding_check.py   refusing non-zero padding between leaves vs not checking it (issue 14)
    refusal_cost.py    refusing each hostile input (JPEGs, tensor messages, acks) vs handling a good one
                       in the node's own code (goal: the worst under 100 ms; issue 31)
    ack_flood.py       the tensor sender under a sustained flood of 22,000 junk acks/s vs the same flow
                       clean, in real dataflows (goal: at least 0.5x; issue 60; about a minute)
    dora_latency.py    end-to-end latency through real dora dataflows against plain
                       send_output_raw, t.contiguous() + send_output_raw and the pa.array pattern
    jpeg_fps.py        JPEG encoding and decoding at 1080p and 4K: every engine (CPU, and CUDA when
                       present) alone and through the encoder's and decoder's node paths, against PIL
                       (issues 5, 34)
    jpeg_node_standin.py  the encoder node's path against its engine alone, on a CPU stand-in of a GPU
                       engine (goal: at least 90 %; issue 34)
    cuda_ipc.py        CUDA IPC through dora against .cpu() -> dora -> .cuda() (issue 30; GPU only)
    ipc_collect.py     a CUDA IPC send's collect of finished messages, 1 to 128 in flight, against
                       looking at every one in full (issue 30; no GPU needed)
    cross_daemon.py    two daemons (machines A, B): cross-daemon vs same-daemon latency and throughput,
                       1 to 64 MB, on loopback and on the host's address (issue 6; about 2.5 min)
    host_staging.py    GPU<->shared-memory copies: plain copy_ vs a driver-registered region (issue 30; GPU only)
    camera_fps.py      the synthetic camera at 1920x1080, 60 fps into the receiver: fps, drops, p50/p99
                       latency against the same frames sent as a flat pa.array (about 95 s)

Each writes its results to out/bench/<script>.json (bench/_results.py; a GPU script without CUDA
writes that it was skipped); `make plots` draws them into out/bench/img/ (bench/plots.py).
Arguments other than --help go to dora_latency.py.

Not run here: compare_revisions.py, which runs small_message.py and dora_latency.py from a base
revision (a git worktree, default 4423d45) and from the current tree, interleaved, and prints
current/base per case with issue 18's goals (`python bench/compare_revisions.py [--quick]`); and
instructions.py, which counts small_message.py's cases in instructions under valgrind, a figure
the machine's load does not move (`python bench/instructions.py [--base REV]`, a few minutes).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    _, latency_args = parser.parse_known_args()  # --help before torch; the rest is dora_latency.py's

    import ack_flood
    import camera_fps
    import cross_daemon
    import cuda_ipc
    import decode_scaling
    import dora_latency
    import header_cost
    import host_staging
    import ipc_collect
    import jpeg_fps
    import jpeg_node_standin
    import padding_check
    import refusal_cost
    import small_message
    import torch
    from _results import RESULTS_DIR, ROOT

    print(
        f"machine: {platform.machine()}, {torch.get_num_threads()} torch threads, python {platform.python_version()}, "
        f"torch {torch.__version__}\n"
    )
    small_message.main([])
    print()
    decode_scaling.main([])
    print()
    header_cost.main([])
    print()
    padding_check.main([])
    print()
    refusal_cost.main([])
    print()
    dora_latency.main(latency_args)
    print()
    ack_flood.main([])
    print()
    jpeg_fps.main([])
    print()
    jpeg_node_standin.main([])
    print()
    cuda_ipc.main([])
    print()
    ipc_collect.main([])
    print()
    cross_daemon.main([])
    print()
    host_staging.main([])
    print()
    camera_fps.main([])
    print(f"\nresults in {RESULTS_DIR.relative_to(ROOT)}/; `make plots` draws them")


if __name__ == "__main__":
    main()
