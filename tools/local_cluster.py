"""A dora cluster of several machines on this host: a coordinator and one daemon per machine id,
all on loopback, to run a dataflow whose nodes are deployed on different machines
(`deploy: {machine: A}`) exactly as dora runs it across real machines, without them.

    python -m tools.local_cluster dataflow-cluster.yml --machines A,B

Ports are chosen free at run time. Every process it starts runs in its own process group and is
torn down by PID (group) when the dataflow ends, fails, or the run is interrupted (Ctrl-C,
SIGTERM): nothing else on the machine is touched, and a coordinator or daemon someone else runs
is left alone. Logs go to ``out/cluster/`` next to the dataflow.

Nodes with `deploy:` run from their daemon's own work directory unless `deploy.working_dir` says
otherwise; so relative paths in `env:` (reports, outputs) mean the same as under `dora run`, the
run uses a copy of the dataflow in which every deployed node without a `working_dir` gets the
dataflow's directory. Each daemon dials the ones started before it (`--zenoh-connect`) with
multicast scouting off: discovery needs nothing from the network.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

__all__ = ["LocalCluster", "ClusterError", "free_ports", "resolve_dataflow", "dora_executable", "main"]

LOOPBACK = "127.0.0.1"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_READY = "Connected to dora-coordinator"


class ClusterError(RuntimeError):
    pass


def dora_executable() -> str:
    """`dora` on PATH, else next to this interpreter (a virtual environment not activated)."""
    found = shutil.which("dora")
    if found:
        return found
    beside = Path(sys.executable).parent / "dora"
    if beside.exists():
        return str(beside)
    raise ClusterError("the dora CLI is not installed: pip install dora-rs-cli (or `make install`)")


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """`count` distinct TCP ports free on `host` right now (the OS picks them). All sockets are
    held until every port is known, so the same port is never handed out twice."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def resolve_dataflow(flow: Path, target: Path) -> list[str]:
    """Write `flow` to `target` (in the same directory, so relative paths keep their meaning)
    with `deploy.working_dir` set to the dataflow's directory where a deployed node has none.
    -> the machine ids the dataflow deploys to."""
    text = flow.read_text()
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise ClusterError(f"{flow}: expected a dataflow with a `nodes:` list")
    machines: list[str] = []
    default = data.get("deploy") if isinstance(data.get("deploy"), dict) else {}
    for node in data["nodes"]:
        if not isinstance(node, dict):
            continue
        deploy = node.get("deploy") if isinstance(node.get("deploy"), dict) else None
        machine = (deploy or {}).get("machine") or default.get("machine")
        if machine is None:
            raise ClusterError(
                f"{flow}: node {node.get('id')!r}: expected `deploy: {{machine: ...}}` (a cluster of machine ids "
                f"has no daemon for nodes without one), got none"
            )
        if str(machine) not in machines:
            machines.append(str(machine))
        if deploy is None:
            deploy = node["deploy"] = dict(default)
        deploy.setdefault("working_dir", str(flow.parent.resolve()))
        if deploy.get("working_dir") is None:
            deploy["working_dir"] = str(flow.parent.resolve())
    target.write_text(
        f"# Written by tools.local_cluster from {flow.name} for one run; removed afterwards.\n"
        + yaml.safe_dump(data, sort_keys=False)
    )
    return machines


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen
    log: Path


@dataclass
class LocalCluster:
    """Coordinator + one daemon per machine id on loopback; a context manager.

    `env` is the environment of the dora processes (nodes inherit the daemon's); `logs` the
    directory for their logs and the daemons' work directories."""

    machines: Sequence[str]
    logs: Path
    env: dict | None = None
    ready_timeout_s: float = 30.0
    dora: str = field(default_factory=dora_executable)
    coordinator_port: int = 0
    announce: bool = False  # print each process started, with its pid
    # The address everything binds and dials. Loopback (the default) keeps the cluster private;
    # dora then relays every cross-daemon message through the daemons (it will not advertise a
    # loopback address to another machine). A routable address of this host lets nodes on
    # different daemons connect directly, as they do across real machines.
    host: str = LOOPBACK
    processes: list[_Process] = field(default_factory=list)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _spawn(self, name: str, args: list[str], cwd: Path) -> _Process:
        cwd.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                [self.dora, *args],
                cwd=cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: torn down with its nodes, by PID
            )
        process = _Process(name, popen, log)
        self.processes.append(process)
        if self.announce:
            print(f"local_cluster: started {name} (pid {popen.pid}, log {log})", flush=True)
        return process

    def start(self, attempts: int = 3) -> None:
        """Start the coordinator and the daemons. A port found free can be taken by another
        process before dora binds it: then everything started is stopped and the start is
        tried again with new ports."""
        if len(set(self.machines)) != len(self.machines) or not self.machines:
            raise ClusterError(f"machines: expected distinct machine ids, got {list(self.machines)}")
        self.logs.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, attempts + 1):
            try:
                self._start_once()
                return
            except ClusterError:
                self.stop()
                if attempt == attempts:
                    raise

    def _start_once(self) -> None:
        ports = free_ports(1 + 2 * len(self.machines), self.host)
        self.coordinator_port = ports[0]
        self._spawn(
            "coordinator",
            ["coordinator", "--interface", self.host, "--port", str(self.coordinator_port), "--store", "memory"],
            self.logs,
        )
        self._wait_for_port(self.coordinator_port, self.processes[-1])
        listen: list[str] = []
        for i, machine in enumerate(self.machines):
            local_port, zenoh_port = ports[1 + 2 * i], ports[2 + 2 * i]
            args = [
                "daemon",
                "--machine-id",
                machine,
                "--coordinator-addr",
                self.host,
                "--coordinator-port",
                str(self.coordinator_port),
                "--local-listen-port",
                str(local_port),
                "--zenoh-no-multicast",
                "--zenoh-listen",
                f"{self.host}:{zenoh_port}",
            ]
            for endpoint in listen:
                args += ["--zenoh-connect", endpoint]
            listen.append(f"tcp/{self.host}:{zenoh_port}")
            process = self._spawn(f"daemon-{machine}", args, self.logs / f"daemon-{machine}")
            self._wait_for_log(process, _READY)

    def _check_alive(self, process: _Process) -> None:
        if process.popen.poll() is not None:
            raise ClusterError(f"{process.name} exited with {process.popen.returncode}:\n{tail_of(process.log)}")

    def _wait_for_port(self, port: int, process: _Process) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            self._check_alive(process)
            with socket.socket() as s:
                if s.connect_ex((self.host, port)) == 0:
                    return
            time.sleep(0.05)
        raise ClusterError(
            f"{process.name}: not listening on {self.host}:{port} after "
            f"{self.ready_timeout_s:g} s:\n{tail_of(process.log)}"
        )

    def _wait_for_log(self, process: _Process, text: str) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            self._check_alive(process)
            if text in _ANSI.sub("", process.log.read_text(errors="replace")):
                return
            time.sleep(0.05)
        raise ClusterError(f"{process.name}: no {text!r} after {self.ready_timeout_s:g} s:\n{tail_of(process.log)}")

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop running dataflows through our own coordinator (`dora stop --all`, then `dora down`,
        on its port: nodes get STOP and end cleanly), then SIGTERM each process group we started and
        every process descended from them (nodes: dora starts them in groups of their own), SIGKILL
        to what is left after `grace_s`. Idempotent; touches nothing it did not start."""
        if not self.processes:
            return
        with _signals_held():  # a second Ctrl-C must not cut the teardown short
            self._stop(grace_s)

    def _stop(self, grace_s: float) -> None:
        if self.coordinator_port and self.processes[0].popen.poll() is None:
            address = ["--coordinator-addr", self.host, "--coordinator-port", str(self.coordinator_port)]
            for command in (["stop", "--all", "--grace-duration", f"{grace_s:g}s"], ["down", "--force"]):
                try:
                    subprocess.run(
                        [self.dora, *command, *address],
                        env=self.cli_env(),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        timeout=grace_s + 5,
                    )
                except (subprocess.TimeoutExpired, OSError):
                    pass
        leaders = [p.popen.pid for p in self.processes]
        family = descendants(leaders)  # read before anyone exits: orphans lose their parent link
        for process in reversed(self.processes):
            _signal_group(process.popen, signal.SIGTERM)
        _signal_pids(family, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in reversed(self.processes):
            try:
                process.popen.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                pass
        while time.monotonic() < deadline and any(_alive(pid) for pid in family):
            time.sleep(0.05)
        for process in reversed(self.processes):
            _signal_group(process.popen, signal.SIGKILL)  # the group may outlive its leader
            try:
                process.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        _signal_pids([pid for pid in family if _alive(pid)], signal.SIGKILL)
        self.processes.clear()

    # ------------------------------------------------------------------ using it
    def cli_env(self) -> dict:
        env = dict(self.env if self.env is not None else os.environ)
        env["DORA_COORDINATOR_ADDR"] = self.host
        env["DORA_COORDINATOR_PORT"] = str(self.coordinator_port)
        return env

    def start_dataflow(
        self, flow: Path, *, timeout_s: float, log: Path | None = None, echo: bool = False
    ) -> subprocess.CompletedProcess:
        """`dora start --attach` on this cluster; -> its result (stdout and stderr together),
        shown line by line as it comes with `echo`. Raises TimeoutExpired past `timeout_s`."""
        for process in self.processes:
            self._check_alive(process)
        args = [
            self.dora,
            "start",
            str(flow),
            "--attach",
            "--coordinator-addr",
            self.host,
            "--coordinator-port",
            str(self.coordinator_port),
        ]
        proc = subprocess.Popen(
            args,
            cwd=flow.parent,
            env=self.cli_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        lines: list[str] = []

        def pump() -> None:
            for line in proc.stdout:
                lines.append(line)
                if echo:
                    print(line, end="", flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout_s)
        except BaseException:  # timeout or interrupt: the CLI goes with the cluster
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            reader.join(timeout=5)
            if log is not None:
                log.write_text("".join(lines))
        return subprocess.CompletedProcess(args, proc.returncode, "".join(lines), "")


@contextlib.contextmanager
def _signals_held():
    """Ignore SIGINT and SIGTERM inside the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (Linux /proc; empty elsewhere)."""
    found = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            found[int(name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    return found


def descendants(roots: Sequence[int]) -> list[int]:
    """Every process below `roots` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return not os.path.isdir("/proc")  # no /proc entry on Linux: gone


def _signal_pids(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _signal_group(popen: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(popen.pid, sig)  # the group was created for this process: its pid is the pgid
    except (ProcessLookupError, PermissionError):
        pass


def tail_of(path: Path, lines: int = 30) -> str:
    try:
        text = _ANSI.sub("", path.read_text(errors="replace"))
    except OSError:
        return f"({path} unreadable)"
    return "\n".join(text.splitlines()[-lines:])


def check_reports(reports: Sequence[Path]) -> list[str]:
    """Print one line per report; -> the ones missing, unreadable or not ok."""
    failed = []
    for report in reports:
        try:
            ok = json.loads(report.read_text()).get("ok") is True
            state = "ok" if ok else "NOT ok"
        except (OSError, ValueError, AttributeError) as e:
            ok, state = False, f"unreadable ({type(e).__name__})"
        print(f"local_cluster: report {report}: {state}", flush=True)
        if not ok:
            failed.append(str(report))
    return failed


def _interrupts_raise() -> None:
    """SIGTERM (and SIGHUP) end the run like Ctrl-C does: through the `finally` that tears down.
    Ctrl-C itself is set explicitly: a process started in the background by a non-interactive
    shell (a CI script's `cmd &`) inherits SIGINT ignored, and Python then leaves it ignored."""

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.local_cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataflow", type=Path)
    parser.add_argument("--machines", help="machine ids, comma-separated (default: those the dataflow deploys to)")
    parser.add_argument(
        "--host", default=LOOPBACK, help="address to bind and dial (default 127.0.0.1: nothing reachable from outside)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the dataflow may run (default 300)")
    parser.add_argument("--logs", type=Path, help="log directory (default: out/cluster next to the dataflow)")
    parser.add_argument(
        "--report",
        action="append",
        default=[],
        type=Path,
        help='a JSON report the dataflow must write with "ok": true (relative to the dataflow; repeatable)',
    )
    args = parser.parse_args(argv)
    flow = args.dataflow.resolve()
    if not flow.is_file():
        print(f"local_cluster: {flow}: no such dataflow file", file=sys.stderr)
        return 2
    logs = args.logs or flow.parent / "out" / "cluster"
    resolved = flow.with_name(f".{flow.stem}.cluster-run.yml")
    _interrupts_raise()
    try:
        machines = resolve_dataflow(flow, resolved)
        if args.machines:
            wanted = [m.strip() for m in args.machines.split(",") if m.strip()]
            missing = [m for m in machines if m not in wanted]
            if missing:
                raise ClusterError(f"--machines: the dataflow deploys to {machines}, {missing} not among {wanted}")
            machines = wanted
        print(
            f"local_cluster: coordinator and daemons {', '.join(machines)} on {args.host} (logs in {logs})", flush=True
        )
        reports = [p if p.is_absolute() else flow.parent / p for p in args.report]
        for report in reports:
            report.unlink(missing_ok=True)  # a report left by an earlier run proves nothing
        with LocalCluster(machines, logs, announce=True, host=args.host) as cluster:
            print(f"local_cluster: coordinator port {cluster.coordinator_port}; starting {flow.name}", flush=True)
            result = cluster.start_dataflow(resolved, timeout_s=args.timeout, log=logs / "dataflow.log", echo=True)
        print(f"local_cluster: dataflow exited with {result.returncode}; coordinator and daemons stopped", flush=True)
        failed = check_reports(reports)
        return result.returncode or (1 if failed else 0)
    except ClusterError as e:
        print(f"local_cluster: {e}", file=sys.stderr)
        return 2
    except subprocess.TimeoutExpired:
        print(
            f"local_cluster: the dataflow ran past --timeout {args.timeout:g} s; stopped everything it started",
            file=sys.stderr,
        )
        return 124
    except KeyboardInterrupt:
        print("local_cluster: interrupted; stopped everything it started", file=sys.stderr)
        return 130
    finally:
        resolved.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
