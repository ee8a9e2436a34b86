"""A real install, offline, over this test's interpreter (what a GPU host or a container has):
`make install PYTHON=...` in a fresh copy of the project, its console scripts and a dataflow run
with the dora it links, `make test-gpu` collecting every gpu test. The installer's decisions,
with fakes: tests/nodes/test_install.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.paths import ROOT
from tools import install_env as installer


# ------------------------------------------------------------------------- a real install, offline
def copy_of_the_project(dest: Path) -> Path:
    """The working tree as a fresh clone would have it (tracked and new files, nothing ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".venv", "out", ".git", "__pycache__", "*.egg-info"))
        return dest
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def run_make(project: Path, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {})}
    for inherited in ("PYTHONPATH", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"):  # `make test` runs this test inside make
        env.pop(inherited, None)
    return subprocess.run(["make", *args], cwd=project, env=env, capture_output=True, text=True, timeout=timeout)


def tiny_wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel of an empty package `name` (what pip needs of one, nothing more)."""
    import zipfile

    module, info = name.replace("-", "_"), f"{name.replace('-', '_')}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_offline_install_over_this_interpreter_then_gpu_tests_collect_and_nodes_run(tmp_path):
    """This test's interpreter plays the GPU host's: it has torch, torchvision, pyarrow and dora.
    `PIP_NO_INDEX=1 make install PYTHON=<it>` in a fresh copy layers .venv over it, fetching
    nothing and installing no torch; then `make test-gpu` collects every gpu test and the
    console scripts run. A hub node that cannot be had offline is a warning, not retried by a
    plain `make`, and installed by a later `make WHEELS=dir` that has its wheel."""
    project = copy_of_the_project(tmp_path / "project")
    absent = "tc-test-absent-hub-node==1.0"  # a hub node on no index and in no wheel folder
    with (project / installer.HUB_NODES).open("a") as f:
        f.write(f"{absent} --no-deps  # for the test: cannot be had offline\n")
    proc = run_make(project, "install", f"PYTHON={sys.executable}", env={"PIP_NO_INDEX": "1"})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert f"install: warning: hub node {absent} is missing: its example's tests skip" in output, output[-3000:]
    # Hub nodes the environment below already has are not installed again; their commands are
    # linked beside .venv's python, where the examples' tests look for them.
    for script in ("dora-opencv-image-splitter", "dora-echo", "dora-camera-opencv"):
        if (Path(sys.executable).parent / script).exists():
            assert (project / ".venv" / "bin" / script).exists(), script
    assert f"using torch {torch.__version__.split('+')[0]}" in output and ".venv ready (layered)" in output, output[
        -2000:
    ]
    python = project / ".venv" / "bin" / "python"
    where = subprocess.run(
        [
            python,
            "-c",
            "import torch, tensor_codec, tensor_codec_nodes; print(torch.__file__); print(tensor_codec_nodes.__file__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0, where.stderr[-2000:]
    torch_file, nodes_file = where.stdout.split()
    assert Path(torch_file) == Path(torch.__file__)  # the preinstalled torch, not a second copy
    assert Path(nodes_file) == project / "nodes" / "__init__.py"  # the copy's nodes, as an installed package
    assert not list((project / ".venv" / "lib").glob("python*/site-packages/torch"))

    # The console scripts are installed and run: a bad setting is reported before dora is needed.
    for script in (
        "tc-camera-source",
        "tc-tensor-sender",
        "tc-tensor-receiver",
        "tc-jpeg-encoder",
        "tc-jpeg-decoder",
        "tc-jpeg-sink",
        "tc-rerun-sink",
    ):
        assert (project / ".venv" / "bin" / script).exists(), script
    bad = subprocess.run(
        [project / ".venv" / "bin" / "tc-tensor-sender"],
        env={**os.environ, "MODE": "bogus"},
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "MODE: expected one of suite, random, safetensors, got 'bogus'" in bad.stderr

    # And they run a real dataflow with the dora the environment provides (linked into .venv/bin).
    bindir = project / ".venv" / "bin"
    flow = tmp_path / "flow" / "dataflow.yml"
    flow.parent.mkdir()
    flow.write_text(
        json.dumps(
            {
                "nodes": [
                    {
                        "id": "sender",
                        "path": str(bindir / "tc-tensor-sender"),
                        "inputs": {"ack": "receiver/ack"},
                        "outputs": ["tensors"],
                        "env": {"MODE": "random", "SIZES": "64KB", "COUNT": "3", "DEVICE": "cpu"},
                    },
                    {
                        "id": "receiver",
                        "path": str(bindir / "tc-tensor-receiver"),
                        "inputs": {"tensors": "sender/tensors"},
                        "outputs": ["ack"],
                        "env": {"DEVICE": "cpu", "STRICT": "1", "REPORT": "report.json"},
                    },
                ]
            }
        )
    )
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "UV_NO_PROJECT": "1"}
    env.pop("PYTHONPATH", None)
    ran = subprocess.run(
        [bindir / "dora", "run", flow], cwd=flow.parent, env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    assert json.loads((flow.parent / "report.json").read_text())["inputs"]["tensors"]["good"] == 3

    # A second `make` (no PYTHON=) keeps the layered .venv and does nothing: offline without a
    # wheel folder, the missing hub node cannot be had either.
    again = run_make(project, "install", env={"PIP_NO_INDEX": "1"})
    assert again.returncode == 0 and again.stdout.strip() == "", again.stdout + again.stderr
    # With its wheel in WHEELS=, a later `make` installs it.
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, *absent.split("=="))
    retry = run_make(project, "install", f"WHEELS={wheels}", env={"PIP_NO_INDEX": "1"})
    assert retry.returncode == 0 and f"hub node {absent}: installed without its dependencies" in retry.stdout, (
        retry.stdout + retry.stderr
    )
    assert json.loads((project / ".venv" / installer.STAMP).read_text())["missing"] == []

    # Every gpu test is collected there, as here.
    here = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    expected = int(re.search(r"(\d+)/\d+ tests collected", here.stdout).group(1))
    if torch.cuda.is_available():
        gpu = run_make(project, "test-gpu", "PYTEST_ARGS=--collect-only -p no:cacheprovider", env={"PIP_NO_INDEX": "1"})
        assert gpu.returncode == 0 and f"{expected}/" in gpu.stdout, gpu.stdout[-3000:]
    else:
        gpu = run_make(project, "test-gpu", "PYTEST_ARGS=-p no:cacheprovider", env={"PIP_NO_INDEX": "1"})
        assert gpu.returncode == 0, gpu.stdout[-3000:] + gpu.stderr[-2000:]
        assert re.search(rf"\b{expected} skipped\b", gpu.stdout), gpu.stdout[-3000:]
