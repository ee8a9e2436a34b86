"""GPU <-> dora's shared memory: the plain pageable copy tensor_codec does, against the same region
registered with the CUDA driver once (cudaHostRegister), the lead issue 30 names for beating it.

tensor_codec used to stage big copies through two pinned chunk buffers of its own; on an H100
(2026-11-26) that was slower than the plain copy at every size from 256 KB to 64 MB (GPU -> host
0.69-0.86x, host -> GPU 0.60-0.95x), so it is gone and every copy is one plain ``copy_``. What
could still pay is copying straight into and out of dora's own buffers once each is registered:
a registration costs far more than one copy, so it pays only if dora hands out the same region
again and again. Per size this prints the plain copy, the copy of a registered region, what one
registration (register + unregister) costs, and after how many reuses of one region it would
pay (plain - registered per copy, against the registration).

    python bench/host_staging.py [--sizes-kb 256,1024,4096,16384,65536] [--reps 20] [--stand-in]

The region is a file in /dev/shm mapped into this process, as dora's are. Needs a CUDA device;
``--stand-in`` runs the same code on the CPU (no registration: the smoke test of this script,
figures meaningless).
"""

from __future__ import annotations

import argparse
import math
import mmap
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_json_option, save, skipped  # noqa: E402

BASELINE = "a plain copy_ between the GPU and a pageable shared-memory region (ratio: plain / registered time)"


class CudaOps:
    """The copies and the driver registration on GPU 0."""

    def __init__(self):
        self.device = torch.device("cuda", 0)
        self.cudart = torch.cuda.cudart()

    def register(self, address: int, nbytes: int) -> None:
        status = self.cudart.cudaHostRegister(address, nbytes, 0)
        if int(status) != 0:
            raise RuntimeError(f"cudaHostRegister failed with status {int(status)}")

    def unregister(self, address: int) -> None:
        self.cudart.cudaHostUnregister(address)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


class StandInOps:
    """The same calls on the CPU: nothing registers, nothing needs a sync."""

    device = torch.device("cpu")

    def register(self, address: int, nbytes: int) -> None:
        pass

    def unregister(self, address: int) -> None:
        pass

    def synchronize(self) -> None:
        pass


class SharedRegion:
    """`nbytes` of a /dev/shm file mapped into this process, as a dora message buffer is."""

    def __init__(self, nbytes: int):
        directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="tc-bench-region-", dir=directory)
        try:
            os.ftruncate(fd, nbytes)
            self.map = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
            os.unlink(path)
        self.tensor = torch.frombuffer(self.map, dtype=torch.uint8)
        self.tensor.fill_(7)  # touch every page: the copies measure copying, not page faults

    @property
    def address(self) -> int:
        return self.tensor.data_ptr()


def timed(fn, reps: int, ops) -> float:
    """Median seconds of `fn` (each call ends with the data where it must be)."""
    fn()
    times = []
    for _ in range(reps):
        ops.synchronize()
        start = time.perf_counter()
        fn()
        ops.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(kb: int, reps: int, ops) -> dict:
    n = kb * 1024
    region = SharedRegion(n)
    on_gpu = torch.empty(n, dtype=torch.uint8, device=ops.device)
    host = region.tensor

    def d2h():
        host.copy_(on_gpu)

    def h2d():
        on_gpu.copy_(host)

    plain = (timed(d2h, reps, ops), timed(h2d, reps, ops))

    def registration():
        ops.register(region.address, n)
        ops.unregister(region.address)

    register_s = timed(registration, max(3, reps // 4), ops)
    ops.register(region.address, n)
    try:
        registered = (timed(d2h, reps, ops), timed(h2d, reps, ops))
    finally:
        ops.unregister(region.address)
    saved = sum(plain) - sum(registered)  # per pair of copies
    return {
        "kb": kb,
        "d2h_plain_ms": plain[0] * 1e3,
        "d2h_registered_ms": registered[0] * 1e3,
        "h2d_plain_ms": plain[1] * 1e3,
        "h2d_registered_ms": registered[1] * 1e3,
        "d2h_ratio": plain[0] / registered[0] if registered[0] else math.inf,
        "h2d_ratio": plain[1] / registered[1] if registered[1] else math.inf,
        "register_ms": register_s * 1e3,
        # reuses of one region (one copy each way) before its registration has paid for itself
        "break_even_reuses": (register_s / saved) if saved > 0 else None,
    }


def report(rows: list[dict], device_name: str) -> None:
    print(f"GPU <-> a pageable shared-memory region on {device_name}: plain copy_ vs the region registered once")
    print(
        f"{'size':>9s}  {'D2H plain':>10s}  {'registered':>10s}  {'ratio':>6s}  {'H2D plain':>10s}  "
        f"{'registered':>10s}  {'ratio':>6s}  {'register':>9s}  {'pays after':>10s}"
    )
    for r in rows:
        pays = "never" if r["break_even_reuses"] is None else f"{math.ceil(r['break_even_reuses'])} reuses"
        print(
            f"{r['kb']:>7d}KB  {r['d2h_plain_ms']:8.3f}ms  {r['d2h_registered_ms']:8.3f}ms  {r['d2h_ratio']:5.2f}x  "
            f"{r['h2d_plain_ms']:8.3f}ms  {r['h2d_registered_ms']:8.3f}ms  {r['h2d_ratio']:5.2f}x  "
            f"{r['register_ms']:7.3f}ms  {pays:>10s}"
        )
    print("(ratio: plain / registered time; above 1.00 a registered region copies faster)")


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-kb", default="256,1024,4096,16384,65536")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--stand-in", action="store_true", help="run on the CPU (a smoke test; figures meaningless)")
    add_json_option(parser, "host_staging")
    args = parser.parse_args(argv)
    if args.stand_in:
        ops, device_name = StandInOps(), "the CPU (stand-in: not GPU figures)"
    elif not torch.cuda.is_available():
        print("host_staging.py: no CUDA device on this machine, nothing measured (run it on a GPU machine)")
        skipped("host_staging", BASELINE, "no CUDA device on this machine", args.json)
        return None
    else:
        ops, device_name = CudaOps(), torch.cuda.get_device_name()
    rows = [measure(int(kb), args.reps, ops) for kb in args.sizes_kb.split(",")]
    report(rows, device_name)
    return save("host_staging", BASELINE, {"rows": rows, "goals": []}, args.json)


if __name__ == "__main__":
    main()
