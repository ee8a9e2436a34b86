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


def python_node(node_id: str, script: Path | str, *, inputs=None, outputs=None, env=None, extra=None) -> dict:
    """A dataflow node entry that runs `script` with this interpreter (no venv assumptions)."""
    node = {"id": node_id, "path": sys.executable, "args": f"-u {script}"}
    if inputs:
        node["inputs"] = inputs
    if outputs:
        node["outputs"] = outputs
    if env:
        node["env"] = {k: str(v) for k, v in env.items()}
    if extra:
        node.update(extra)
    return node


def run_dataflow(dora_cli: str, workdir: Path, nodes: list[dict], *, timeout: float = 120) -> subprocess.CompletedProcess:
    """Write the dataflow (JSON is valid YAML) into `workdir` and run it with `dora run`."""
    workdir.mkdir(parents=True, exist_ok=True)
    flow = workdir / "dataflow.yml"
    flow.write_text(json.dumps({"nodes": nodes}, indent=2))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [dora_cli, "run", str(flow)], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )
    (workdir / "dora-output.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    return proc


def tail(proc: subprocess.CompletedProcess, lines: int = 60) -> str:
    text = (proc.stdout or "") + "\n" + (proc.stderr or "")
    return "\n".join(text.splitlines()[-lines:])
