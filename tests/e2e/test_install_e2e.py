"""A real install, offline, over this test's interpreter (what a GPU host or a container has):
`make install PYTHON=...` in a fresh copy of the project (made once, for this module's tests), its
console scripts and a dataflow run with the dora it links, `make test-gpu` collecting every gpu
test, hub nodes that cannot be had offline. The interpreter may have the dora-hub nodes of
examples/hub-nodes.txt (this machine's .venv) or not (a GPU host, where offline none can be had):
each that it lacks must be warned about and recorded, and the test of those it has skips, saying
why. The installer's decisions, with fakes: tests/nodes/test_install.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
import torch

from tests.support.collection import gpu_tests_collected_here
from tests.support.paths import ROOT, registered_node_scripts
from tests.support.wheels import tiny_wheel
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


ABSENT = "tc-test-absent-hub-node==1.0"  # a hub node on no index and in no wheel folder


@dataclass
class Layered:
    """`PIP_NO_INDEX=1 make install PYTHON=<this interpreter>` in a fresh copy of the project."""

    tmp: Path
    project: Path
    output: str  # make install's stdout and stderr
    hub_here: list[str]  # the hub nodes (name==version) this interpreter's environment has
    hub_not_here: list[str]  # the others: offline they can be had only from a wheel folder

    @property
    def bindir(self) -> Path:
        return self.project / ".venv" / "bin"

    def stamp(self) -> dict:
        return json.loads((self.project / ".venv" / installer.STAMP).read_text())


def has_dist(requirement: str) -> bool:
    """Whether this interpreter's environment has the distribution `name==version`."""
    name, version = requirement.split("==")
    try:
        return metadata.version(name) == version
    except metadata.PackageNotFoundError:
        return False


@pytest.fixture(scope="module")
def layered(tmp_path_factory) -> Layered:
    """This test's interpreter plays the GPU host's: it has torch, torchvision, pyarrow and dora,
    and the hub nodes of examples/hub-nodes.txt or not (a GPU host has none, and offline none can
    be had). One more hub node, ABSENT, is listed, that no host has."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    tmp = tmp_path_factory.mktemp("layered")
    project = copy_of_the_project(tmp / "project")
    hub = [text for text, _ in installer.hub_nodes(project / installer.HUB_NODES)]
    with (project / installer.HUB_NODES).open("a") as f:
        f.write(f"{ABSENT} --no-deps  # for the test: cannot be had offline\n")
    proc = run_make(project, "install", f"PYTHON={sys.executable}", env={"PIP_NO_INDEX": "1"})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return Layered(tmp, project, output, [t for t in hub if has_dist(t)], [t for t in hub if not has_dist(t)])


def test_offline_install_over_this_interpreter_layers_venv_over_its_torch(layered):
    """It fetches nothing and installs no torch: .venv uses this interpreter's, and the copy's
    project as an installed package."""
    output = layered.output
    assert f"using torch {torch.__version__.split('+')[0]}" in output and ".venv ready (layered)" in output, output[
        -2000:
    ]
    where = subprocess.run(
        [
            layered.bindir / "python",
            "-c",
            "import torch, tensor_codec, tensor_codec_nodes; print(torch.__file__); print(tensor_codec_nodes.__file__)",
        ],
        cwd=layered.tmp,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0, where.stderr[-2000:]
    torch_file, nodes_file = where.stdout.split()
    assert Path(torch_file) == Path(torch.__file__)  # the preinstalled torch, not a second copy
    assert Path(nodes_file) == layered.project / "nodes" / "__init__.py"  # the copy's nodes, as an installed package
    assert not list((layered.project / ".venv" / "lib").glob("python*/site-packages/torch"))


def test_offline_install_over_this_interpreter_then_nodes_run_a_dataflow(layered):
    """The console scripts are installed and run: a bad setting is reported before dora is
    needed, and they run a real dataflow with the dora the environment provides (linked into
    .venv/bin)."""
    bindir = layered.bindir
    for script in registered_node_scripts().values():  # every node's, from pyproject.toml
        assert (bindir / script).exists(), script
    bad = subprocess.run(
        [bindir / "tc-tensor-sender"], env={**os.environ, "MODE": "bogus"}, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "MODE: expected one of suite, random, safetensors, got 'bogus'" in bad.stderr

    flow = layered.tmp / "flow" / "dataflow.yml"
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


def test_offline_install_over_this_interpreter_then_gpu_tests_collect_there_as_here(layered, request):
    expected = gpu_tests_collected_here(request.session)
    assert expected > 0
    project = layered.project
    if torch.cuda.is_available():
        gpu = run_make(project, "test-gpu", "PYTEST_ARGS=--collect-only -p no:cacheprovider", env={"PIP_NO_INDEX": "1"})
        assert gpu.returncode == 0 and f"{expected}/" in gpu.stdout, gpu.stdout[-3000:]
    else:
        gpu = run_make(project, "test-gpu", "PYTEST_ARGS=-p no:cacheprovider", env={"PIP_NO_INDEX": "1"})
        assert gpu.returncode == 0, gpu.stdout[-3000:] + gpu.stderr[-2000:]
        assert re.search(rf"\b{expected} skipped\b", gpu.stdout), gpu.stdout[-3000:]


def test_offline_a_hub_node_not_to_be_had_is_a_warning_and_a_later_make_with_its_wheel_installs_it(layered):
    """A hub node that cannot be had offline (ABSENT; on a GPU host every hub node) is a warning
    and recorded as missing, not retried by a plain `make`, and installed by a later
    `make WHEELS=dir` that has its wheel."""
    output, project = layered.output, layered.project
    warned = [t for t in [*layered.hub_not_here, ABSENT] if f"install: warning: hub node {t} is missing: " in output]
    assert ABSENT in warned, output[-3000:]
    for text in layered.hub_not_here:  # none here: pip's own find-links may still have had it
        assert text in warned or f"install: hub node {text}: installed" in output, (text, output[-3000:])
    # The missing are those warned about, hub nodes and test requirements alike; a hub node this
    # environment has is not among them.
    first = layered.stamp()["missing"]
    assert [m for m in first if m in warned] == warned and not set(first) & set(layered.hub_here), first
    assert all(f" {m} is missing" in output for m in first), (first, output[-3000:])

    # A second `make` (no PYTHON=) keeps the layered .venv and does nothing: offline without a
    # wheel folder, the missing hub nodes cannot be had either.
    again = run_make(project, "install", env={"PIP_NO_INDEX": "1"})
    assert again.returncode == 0 and again.stdout.strip() == "", again.stdout + again.stderr
    # With its wheel in WHEELS=, a later `make` installs it (the others stay missing).
    wheels = layered.tmp / "wheels"
    tiny_wheel(wheels, *ABSENT.split("=="))
    retry = run_make(project, "install", f"WHEELS={wheels}", env={"PIP_NO_INDEX": "1"})
    assert retry.returncode == 0 and f"hub node {ABSENT}: installed without its dependencies" in retry.stdout, (
        retry.stdout + retry.stderr
    )
    assert layered.stamp()["missing"] == [m for m in first if m != ABSENT]


def test_offline_hub_nodes_this_environment_has_are_linked_not_installed_again(layered):
    """Hub nodes the environment below already has are not installed again; their commands are
    linked beside .venv's python, where the examples' tests look for them."""
    if not layered.hub_here:
        pytest.skip(
            f"this interpreter's environment ({sys.prefix}) has none of the hub nodes of {installer.HUB_NODES} "
            f"({', '.join(layered.hub_not_here)}), and offline they cannot be had (a GPU host): the installer's "
            "warning for each is checked by test_offline_a_hub_node_not_to_be_had_is_a_warning_..."
        )
    for text in layered.hub_here:
        assert f"hub node {text}: installed" not in layered.output and text not in layered.stamp()["missing"], text
        scripts = [
            e.name for e in metadata.distribution(text.split("==")[0]).entry_points if e.group == "console_scripts"
        ]
        for script in scripts:
            if (Path(sys.executable).parent / script).exists():
                assert (layered.bindir / script).exists(), script
