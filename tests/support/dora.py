"""Running real dora dataflows (and the dora CLI) with what explains a failure: the receivers'
reports, the nodes' logs and dora's output.

Nothing here depends on the project's .venv: nodes run with `sys.executable`, and `dora` is found
on PATH or next to the interpreter. conftest.py's `dora_cli` fixture and its report hook use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.support.paths import DORA_NODES, NODES, ROOT, TESTS  # noqa: F401 (re-exported)
from tests.support.waiting import wait_until
from tools.fuzz_nodes.dora_run import log_lines
from tools.local_cluster import descendants


def dora_executable() -> str | None:
    found = shutil.which("dora")
    if found:
        return found
    beside = Path(sys.executable).parent / "dora"
    return str(beside) if beside.exists() else None


def find_script(name: str) -> str | None:
    """Absolute path of a console script installed next to the interpreter, or on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name)


def node_script(name: str) -> str:
    """Absolute path of one of the project's console scripts; fails clearly when the project is
    not installed in this environment."""
    found = find_script(name)
    if found is None:
        pytest.fail(f"console script {name!r} not found: install the project (pip install -e .) in this environment")
    return found


def _node(base: dict, inputs, outputs, env, extra) -> dict:
    node = dict(base)
    if inputs:
        node["inputs"] = inputs
    if outputs:
        node["outputs"] = outputs
    if env:
        node["env"] = {k: str(v) for k, v in env.items()}
    if extra:
        node.update(extra)
    return node


def script_node(node_id: str, script: str, *, inputs=None, outputs=None, env=None, extra=None) -> dict:
    """A dataflow node entry running a console script of the project by absolute path."""
    return _node({"id": node_id, "path": node_script(script)}, inputs, outputs, env, extra)


def dora_env(*, repo_on_pythonpath: bool = True) -> dict:
    """Environment for dora commands: console scripts and dora on PATH, uv kept out of projects
    (see the Makefile), and (by default) the repository importable for test-only nodes."""
    env = dict(os.environ)
    bindirs = [str(Path(sys.executable).parent)]
    dora = dora_executable()
    if dora:
        bindirs.append(str(Path(dora).parent))
    env["PATH"] = os.pathsep.join(bindirs + [env.get("PATH", "")])
    env["UV_NO_PROJECT"] = "1"
    if repo_on_pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def python_node(node_id: str, script: Path | str, *, inputs=None, outputs=None, env=None, extra=None) -> dict:
    """A dataflow node entry that runs `script` with this interpreter (no venv assumptions)."""
    return _node({"id": node_id, "path": sys.executable, "args": f"-u {script}"}, inputs, outputs, env, extra)


# ------------------------------------------------------------------------------ what a run did

REPORT_CHARS = 8000  # of each receiver report shown with a failure
RECEIVER_LOG_LINES = 40  # of each receiver's own log
OTHER_LOG_LINES = 8  # of every other node's log
OUTPUT_LINES = 60  # of dora's own output


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FRAME = re.compile(r"^\s*(\d+: |at \S+:\d+)")  # a frame of a Rust (or C) stack backtrace


def _read_text(path: Path) -> str | None:
    try:
        return _ANSI.sub("", path.read_text(errors="replace"))
    except OSError:
        return None


def without_backtraces(lines: list[str]) -> list[str]:
    """`lines` with the frames of stack backtraces (dora's, a crashing node's) left out: they
    would push what explains a failure out of the lines shown."""
    out, dropped = [], 0
    for line in lines:
        if _FRAME.match(line):
            dropped += 1
            continue
        if dropped:
            out.append(f"    ... ({dropped} backtrace lines left out)")
            dropped = 0
        out.append(line)
    if dropped:
        out.append(f"    ... ({dropped} backtrace lines left out)")
    return out


def _log_lines(path: Path, stream: str | None = None) -> list[str]:
    """A dora node log (`out/<dataflow>/log_<node>.jsonl`, one JSON object per line) as text; with
    `stream` ("stdout" or "stderr"), only what came on it (dora reads the two apart, so a block one
    of them printed may have the other's lines inside it in the log)."""
    lines = [text for came_on, text in log_lines(_read_text(path) or "") if stream in (None, came_on)]
    return without_backtraces(lines)


class DataflowRun:
    """What a dora command did (`returncode`, `stdout`, `stderr`, as subprocess.CompletedProcess)
    and, for a failure, what explains it: each receiver's JSON report, the receivers' own logs and
    the other nodes' last log lines, then dora's output. `explain()` says it all;
    `with run.explained():` adds it to any assertion that fails inside the block."""

    def __init__(
        self,
        args,
        workdir: Path,
        returncode: int | None,
        stdout: str,
        stderr: str,
        *,
        reports: dict[str, Path] | None = None,
        receivers: Iterable[str] = (),
        timed_out: float | None = None,
    ):
        self.args = args
        self.workdir = Path(workdir)
        self.returncode = returncode
        self.stdout = stdout or ""
        self.stderr = stderr or ""
        self.reports = dict(reports or {})  # node id -> its report file
        self.receivers = set(receivers) | set(self.reports)
        self.timed_out = timed_out  # the limit it ran past, if it did

    @property
    def output(self) -> str:
        return self.stdout + "\n" + self.stderr

    def report(self, node_id: str | None = None) -> dict:
        """A receiver's JSON report (the only one when `node_id` is None); fails explaining the run
        when it was not written or does not parse."""
        if node_id is None:
            assert len(self.reports) == 1, f"which report? the run has {sorted(self.reports)}"
            node_id = next(iter(self.reports))
        assert node_id in self.reports, f"no report from {node_id!r}: the run has {sorted(self.reports)}"
        path = self.reports[node_id]
        text = _read_text(path)
        assert text is not None, f"no report from {node_id!r} at {path}\n{self.explain()}"
        try:
            return json.loads(text)
        except ValueError as e:
            raise AssertionError(f"report of {node_id!r} at {path} is not JSON ({e})\n{self.explain()}") from None

    def node_logs(self) -> dict[str, Path]:
        """node id -> its dora log file (the newest run's, in the dataflow's directory)."""
        logs: dict[str, Path] = {}
        for path in sorted(self.workdir.glob("out/*/log_*.jsonl"), key=lambda p: p.stat().st_mtime):
            logs[path.name[len("log_") : -len(".jsonl")]] = path
        return logs

    def explain(self, lines: int = OUTPUT_LINES) -> str:
        status = (
            f"did not end within {self.timed_out:g} s (stopped; exit status {self.returncode})"
            if self.timed_out
            else f"exit status {self.returncode}"
        )
        parts = [f"==== dataflow run in {self.workdir}: {status} ===="]
        for node_id, path in sorted(self.reports.items()):
            text = _read_text(path)
            if text is None:
                parts.append(f"---- report of {node_id!r} ({path}): not written ----")
                continue
            try:
                text = json.dumps(json.loads(text), indent=1)
            except ValueError:
                pass
            if len(text) > REPORT_CHARS:
                text = text[:REPORT_CHARS] + f"\n... ({len(text) - REPORT_CHARS} more characters in {path})"
            parts.append(f"---- report of {node_id!r} ({path}) ----\n{text}")
        logs = self.node_logs()
        for node_id in sorted(logs, key=lambda n: (n in self.receivers, n)):  # receivers last, nearest the end
            keep = RECEIVER_LOG_LINES if node_id in self.receivers else OTHER_LOG_LINES
            shown = _log_lines(logs[node_id])[-keep:]
            parts.append(
                f"---- log of {node_id!r} (last {len(shown)} lines of {logs[node_id]}) ----\n" + "\n".join(shown)
            )
        out = without_backtraces(_ANSI.sub("", self.output).splitlines())[-lines:]
        parts.append(f"---- dora's output (last {len(out)} lines) ----\n" + "\n".join(out))
        return "\n".join(parts)

    @contextlib.contextmanager
    def explained(self):
        """Assertions failing inside the block carry `explain()` in their message."""
        try:
            yield self
        except AssertionError as e:
            if RUN_BANNER not in str(e):
                e.args = (f"{e}\n{self.explain()}",) + tuple(e.args[1:])
            raise


RUN_BANNER = "==== dataflow run in "
_runs: list[DataflowRun] = []  # the current test's runs, for failures the test did not explain


REPORT_KEYS = ("REPORT", "RESULT")  # a node's JSON report (the receiver's) or result (test nodes')


def _receiver_reports(nodes: list[dict], workdir: Path) -> tuple[dict[str, Path], set[str]]:
    """Reports (env REPORT or RESULT, relative to the dataflow's directory) and receiver node ids."""
    reports, receivers = {}, set()
    for node in nodes:
        if not isinstance(node, dict) or "id" not in node:
            continue
        env = node.get("env") or {}
        for key in REPORT_KEYS:
            if env.get(key):
                reports[str(node["id"])] = workdir / str(env[key])
        if "receiver" in str(node.get("path", "")) or "receiver" in str(node.get("args", "")):
            receivers.add(str(node["id"]))
    return reports, receivers


def flow_nodes(flow: Path) -> list[dict]:
    import yaml

    try:
        data = yaml.safe_load(flow.read_text())
    except (OSError, yaml.YAMLError):
        return []
    return list(data.get("nodes") or []) if isinstance(data, dict) else []


def run_dora(
    args: list[str],
    flow: Path,
    *,
    timeout: float,
    env: dict | None = None,
    reports: dict[str, Path] | None = None,
    receivers: Iterable[str] = (),
) -> DataflowRun:
    """Run a dora command about `flow` in the flow's directory. Receivers and their reports come
    from the flow's nodes (env REPORT or RESULT) unless given. Past `timeout` the command is interrupted as
    Ctrl-C would (dora stops the dataflow; receivers still write their reports), then killed with
    whatever it started, and the test fails explaining the run. Output saved as dora-output.log."""
    workdir = flow.parent
    if reports is None:
        reports, found = _receiver_reports(flow_nodes(flow), workdir)
        receivers = set(receivers) | found
    proc = subprocess.Popen(
        args,
        cwd=workdir,
        env=env or dora_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    timed_out = None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = timeout
        family = descendants([proc.pid])  # nodes run in process groups of their own
        proc.send_signal(signal.SIGINT)  # as Ctrl-C: dora stops the dataflow, receivers write reports
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            family += descendants([proc.pid])
            proc.kill()
            stdout = stderr = None
        for pid in family:  # whatever it started and left behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if stdout is None:
            stdout, stderr = proc.communicate()
    (workdir / "dora-output.log").write_text(stdout + "\n--- stderr ---\n" + stderr)
    run = DataflowRun(
        args, workdir, proc.returncode, stdout, stderr, reports=reports, receivers=receivers, timed_out=timed_out
    )
    _runs.append(run)
    if timed_out:
        pytest.fail(f"`{' '.join(map(str, args))}` did not end within {timeout:g} s\n{run.explain()}")
    return run


def run_dataflow(dora_cli: str, workdir: Path, nodes: list[dict], *, timeout: float = 180) -> DataflowRun:
    """Write the dataflow (JSON is valid YAML) into `workdir` and run it with `dora run`."""
    workdir.mkdir(parents=True, exist_ok=True)
    flow = workdir / "dataflow.yml"
    flow.write_text(json.dumps({"nodes": nodes}, indent=2))
    return run_flow_file(dora_cli, flow, timeout=timeout)


def run_flow_file(dora_cli: str, flow: Path, *, timeout: float = 180, env: dict | None = None) -> DataflowRun:
    """`dora run` an existing dataflow file in its own directory (see run_dora)."""
    return run_dora([dora_cli, "run", str(flow)], flow, timeout=timeout, env=env)


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _stop_group(popen: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM the process group started for `popen` (start_new_session: its pid is the pgid),
    SIGKILL what is left after `grace_s`, and reap it."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, sig)
        try:
            popen.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def private_dora(dora_cli: str, workdir: Path, env: dict | None = None, *, ready_timeout: float = 120):
    """A dora coordinator and daemon of this test's own, as `dora up` starts them, but on free
    loopback ports with an in-memory store: a coordinator someone else has up on this machine
    (another test run, a `make run`, one left behind with a daemon whose directory is gone) is
    neither used nor taken down, and `dora up`'s single per-user store is not contended.
    -> the environment that points dora commands at it. Stopped by PID at the end, with what it
    ran."""
    env = dict(env or dora_env())
    logs = workdir / "out" / "private-dora"
    logs.mkdir(parents=True, exist_ok=True)
    coordinator_port, listen_port, zenoh_port = _free_ports(3)
    env["DORA_COORDINATOR_ADDR"] = "127.0.0.1"
    env["DORA_COORDINATOR_PORT"] = str(coordinator_port)
    started: list[subprocess.Popen] = []

    def spawn(name: str, args: list[str]) -> Path:
        log = logs / f"{name}.log"
        with open(log, "wb") as out:
            started.append(
                subprocess.Popen(
                    [dora_cli, *args],
                    cwd=logs,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        return log

    def ready(log: Path, text: str) -> bool:
        for popen in started:
            assert popen.poll() is None, f"{popen.args[1]} exited with {popen.returncode}:\n{_read_text(log)}"
        return text in (_read_text(log) or "")

    try:
        log = spawn(
            "coordinator",
            ["coordinator", "--interface", "127.0.0.1", "--port", str(coordinator_port), "--store", "memory"],
        )
        wait_until(
            lambda: ready(log, "") and _listening(coordinator_port),
            timeout=ready_timeout,
            describe=f"the coordinator to listen on port {coordinator_port} ({log})",
        )
        log = spawn(
            "daemon",
            [
                "daemon",
                "--coordinator-addr",
                "127.0.0.1",
                "--coordinator-port",
                str(coordinator_port),
                "--local-listen-port",
                str(listen_port),
                "--zenoh-no-multicast",
                "--zenoh-listen",
                f"127.0.0.1:{zenoh_port}",
            ],
        )
        wait_until(
            lambda: ready(log, "Connected to dora-coordinator"),
            timeout=ready_timeout,
            describe=f"the daemon to connect ({log})",
        )
        yield env
    finally:
        if started and started[0].poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                subprocess.run([dora_cli, "down"], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        family = descendants([popen.pid for popen in started])
        for popen in reversed(started):
            _stop_group(popen)
        for pid in family:  # nodes run in process groups of their own
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def tail(proc, lines: int = OUTPUT_LINES) -> str:
    """For an assertion message: a run explained (reports, node logs, dora's output), or the last
    lines of any other command's output."""
    if isinstance(proc, DataflowRun):
        return proc.explain(lines)
    text = (proc.stdout or "") + "\n" + (proc.stderr or "")
    return "\n".join(text.splitlines()[-lines:])
