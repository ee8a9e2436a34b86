"""Shared test helpers: the `gpu` marker's skip, and running real dora dataflows.

Nothing here depends on the project's .venv: nodes run with `sys.executable`, and `dora` is found
on PATH or next to the interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
NODES = ROOT / "nodes"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def dora_executable() -> str | None:
    found = shutil.which("dora")
    if found:
        return found
    beside = Path(sys.executable).parent / "dora"
    return str(beside) if beside.exists() else None


@pytest.fixture(scope="session")
def dora_cli() -> str:
    path = dora_executable()
    if path is None:
        pytest.fail("the dora CLI is not installed (pip install dora-rs-cli); end-to-end tests need it")
    return path


def node_script(name: str) -> str:
    """Absolute path of one of the project's console scripts (installed next to the interpreter,
    or on PATH); fails clearly when the project is not installed in this environment."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
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


def run_dataflow(dora_cli: str, workdir: Path, nodes: list[dict], *, timeout: float = 120) -> subprocess.CompletedProcess:
    """Write the dataflow (JSON is valid YAML) into `workdir` and run it with `dora run`."""
    workdir.mkdir(parents=True, exist_ok=True)
    flow = workdir / "dataflow.yml"
    flow.write_text(json.dumps({"nodes": nodes}, indent=2))
    return run_flow_file(dora_cli, flow, timeout=timeout)


def run_flow_file(dora_cli: str, flow: Path, *, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """`dora run` an existing dataflow file in its own directory; output saved next to it."""
    workdir = flow.parent
    env = env or dora_env()
    proc = subprocess.run(
        [dora_cli, "run", str(flow)], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )
    (workdir / "dora-output.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    return proc


def tail(proc: subprocess.CompletedProcess, lines: int = 60) -> str:
    text = (proc.stdout or "") + "\n" + (proc.stderr or "")
    return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(autouse=True)
def _fresh_routes():
    """Routes are cached per id(node) for a node's life; test nodes die young and their ids come
    back, so each test starts with no cached route."""
    from tensor_codec import routing

    routing._routes.clear()
    routing._announced.clear()
    yield
