"""Running one dataflow with `dora run` under a time limit, and what it left: dora's output, each
node's log (dora 1.1 writes `out/<run>/log_<node>.jsonl` beside the dataflow), each node's exit
status as dora reports it. No pytest and no .venv paths: the project's console scripts and dora
are found next to this interpreter (or on PATH), as tests/support/dora.py finds them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.local_cluster import descendants  # the one walk of a process tree

ROOT = Path(__file__).resolve().parents[2]  # the repository: the hostile node imports tools.fuzz_nodes

__all__ = ["ROOT", "DoraRun", "dora_executable", "find_script", "log_lines", "run_flow", "dora_env"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# dora's verdict on a node that did not end well ("Node `x` failed: exited with code 1 ...", or a
# signal, or a spawn error); a node that ended well has no such line
_FAILED = re.compile(r"Node `([^`]+)` failed: ([^\n]*)")
_CODE = re.compile(r"exited with code (-?\d+)")


def dora_executable() -> str | None:
    beside = Path(sys.executable).parent / "dora"
    if beside.exists():
        return str(beside)
    return shutil.which("dora")


def find_script(name: str) -> str:
    """Absolute path of one of the project's console scripts (tc-*), next to this interpreter or on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            f"console script {name!r}: expected next to {sys.executable} or on PATH (install the project: "
            "pip install -e .), found neither"
        )
    return found


def dora_env() -> dict:
    """dora and the console scripts on PATH, uv kept out of the project (see the Makefile), the
    repository importable (the hostile node is tools.fuzz_nodes.node)."""
    env = dict(os.environ)
    bindirs = [str(Path(sys.executable).parent)]
    dora = dora_executable()
    if dora:
        bindirs.append(str(Path(dora).parent))
    env["PATH"] = os.pathsep.join(bindirs + [env.get("PATH", "")])
    env["UV_NO_PROJECT"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@dataclass
class DoraRun:
    workdir: Path
    returncode: int | None
    output: str  # dora's stdout and stderr
    wall_s: float
    timed_out: float | None  # the limit it ran past, if it did
    # node id -> its log, line by line: (the stream it came on, "stdout" or "stderr", or "" where
    # the log does not say; the line)
    logs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def log(self, node_id: str, stream: str | None = None) -> str:
        """A node's log: its own file, else the lines dora printed for it. With `stream`, only the
        lines that came on it: dora reads a node's stdout and stderr apart, so a block printed on
        one (tc-monitor's summary table) may have the other's lines between its own in the log.
        (dora's own output does not say which stream a line came on: there, every line is kept.)"""
        if node_id in self.logs:
            return "\n".join(text for came_on, text in self.logs[node_id] if stream in (None, came_on))
        return "\n".join(line for line in self.output.splitlines() if f" {node_id}: " in line)

    def exit_codes(self) -> dict[str, int]:
        """Nodes dora reported as failed -> their exit code (-1: no code, e.g. killed by a signal)."""
        codes = {}
        for node, how in _FAILED.findall(self.output):
            code = _CODE.search(how)
            codes[node] = int(code.group(1)) if code else -1
        return codes


def _node_logs(workdir: Path) -> dict[str, list[tuple[str, str]]]:
    logs: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(workdir.glob("out/*/log_*.jsonl"), key=lambda p: p.stat().st_mtime):
        logs[path.name[len("log_") : -len(".jsonl")]] = log_lines(path.read_text(errors="replace"))
    return logs


def log_lines(text: str) -> list[tuple[str, str]]:
    """A dora 1.1 node log (one JSON object per line: "msg", and "stream" where it came from the
    node's stdout or stderr) -> [(stream or "", line)], a line that is not JSON kept as it is."""
    lines: list[tuple[str, str]] = []
    for raw in _ANSI.sub("", text).splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            lines.append(("", raw))
            continue
        stream = entry.get("stream")
        stream = stream if isinstance(stream, str) else ""
        lines.extend((stream, line) for line in str(entry.get("msg", raw)).splitlines())
    return lines


def run_flow(flow: Path, timeout: float) -> DoraRun:
    """`dora run flow` in the flow's directory. Past `timeout` it is interrupted as Ctrl-C would
    (dora stops the dataflow, nodes end), then killed with whatever it started (by PID)."""
    dora = dora_executable()
    if dora is None:
        raise FileNotFoundError(f"the dora CLI: expected next to {sys.executable} or on PATH, found neither")
    workdir = flow.parent
    started = time.monotonic()
    proc = subprocess.Popen(
        [dora, "run", str(flow)],
        cwd=workdir,
        env=dora_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    timed_out = None
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = timeout
        family = descendants([proc.pid])  # nodes run in process groups of their own
        proc.send_signal(signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            family += descendants([proc.pid])
            proc.kill()
            output, _ = proc.communicate()
        for pid in family:  # what it started and left behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    wall = time.monotonic() - started
    output = _ANSI.sub("", output or "")
    (workdir / "dora-output.log").write_text(output)
    return DoraRun(workdir, proc.returncode, output, wall, timed_out, _node_logs(workdir))
