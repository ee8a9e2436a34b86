"""Running the check's commands: each in its own process group, under a time limit taken from
the run's budget, its output kept and appended to gpu-check.log. A command past its limit gets
SIGINT (pytest then still writes its junit XML; the cluster runner tears its daemons down), then
SIGTERM and SIGKILL; so does one running when the check itself is interrupted."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Ran:
    returncode: int
    output: str
    seconds: float
    timed_out: bool

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


class Context:
    def __init__(self, out_dir: Path, work: Path, log: IO[str], budget_s: float):
        self.out_dir = out_dir
        self.work = work  # scratch space, removed afterwards (only reports go to out_dir)
        self.log = log
        self.deadline = time.monotonic() + budget_s
        self.python = sys.executable
        self.bindir = Path(sys.executable).parent
        self.cuda = False
        # Where the pipeline parts put every node. Only the tests say "cpu": they run the GPU
        # parts of the check itself on a machine without one.
        self.device = "cuda"
        self.environment: dict = {}  # what the environment part found (its "optional" engines too)
        self.workers = None  # engines.Workers: how the gpu tests are spread (decided by that part)
        self.cases: list | None = None  # the gpu tests' results (engines.Case); None: not run
        self.test_paths: list[str] = []  # what pytest runs of the gpu tests; only tests name a suite of their own
        self.reserve = 0.0  # seconds of the budget the part running leaves to the parts after it
        self.only: str | None = None  # "jpeg": the JPEG engines' parts only (no dora needed)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def limit(self, cap_s: float) -> float:
        """The time a part may take: its cap, or what is left of the budget less what the
        parts after it are to be left (but never less than half of what is left)."""
        left = self.remaining()
        return max(0.0, min(cap_s, max(left - self.reserve, left / 2)))

    def dora(self) -> str | None:
        beside = self.bindir / "dora"
        return str(beside) if beside.exists() else shutil.which("dora")

    def env(self) -> dict:
        """For dora and the nodes: console scripts and dora first on PATH, unbuffered output, uv
        kept out of projects (see the Makefile)."""
        env = dict(os.environ)
        dirs = [str(self.bindir)] + ([str(Path(self.dora()).parent)] if self.dora() else [])
        env["PATH"] = os.pathsep.join(dirs + [env.get("PATH", "")])
        env["UV_NO_PROJECT"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        return env

    def run(self, cmd: list, *, timeout: float, cwd: Path | None = None) -> Ran:
        cmd = [str(c) for c in cmd]
        self.log.write(f"\n$ {' '.join(cmd)}    (in {cwd or ROOT}, limit {timeout:.0f} s)\n")
        self.log.flush()
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd or ROOT,
                env=self.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        except OSError as e:  # not installed, not executable: the part says so and the check goes on
            self.log.write(f"[gpu-check: cannot start it: {e}]\n")
            return Ran(127, f"cannot start {cmd[0]}: {e}\n", 0.0, False)
        chunks: list[str] = []
        reader = threading.Thread(target=self._read, args=(proc, chunks), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            timed_out = True
            self.log.write(f"\n[gpu-check: past its limit of {timeout:.0f} s, stopping it]\n")
            stop(proc)
        except BaseException:
            stop(proc, interrupted=True)
            raise
        finally:
            _kill_group(proc.pid)  # whatever it left behind in its group
        reader.join(timeout=10)
        return Ran(proc.returncode, "".join(chunks), time.monotonic() - start, timed_out)

    def _read(self, proc: subprocess.Popen, chunks: list[str]) -> None:
        for line in proc.stdout:
            chunks.append(line)
            self.log.write(line)
        self.log.flush()


def stop(proc: subprocess.Popen, *, interrupted: bool = False) -> None:
    """SIGINT first (pytest still writes its junit XML, the cluster runner tears its daemons down),
    then SIGTERM, then SIGKILL. Interrupted, within about 15 s: a supervisor's `timeout -k 20`
    kills the check 20 s after its own SIGINT, and the report must be written before that."""
    graces = (10, 3, 2) if interrupted else (20, 5, 5)
    for sig, grace in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), graces):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
