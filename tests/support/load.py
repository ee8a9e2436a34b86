"""A CPU hog: busy processes beside a test, so it runs the way a loaded host runs it (a GPU host
with 14 xdist workers, CI beside other jobs). Timing stays out of the assertions: the hog only
makes the races that load exposes likely."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

__all__ = ["cpu_hog"]


@contextlib.contextmanager
def cpu_hog(processes: int = 2) -> Iterator[list[subprocess.Popen]]:
    """`processes` interpreters spinning on one core each for the duration of the block."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
