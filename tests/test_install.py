"""Installing over an interpreter that already has torch (GPU hosts, containers), offline, and the
supported-version rule shared by the installer, pyproject.toml and the import-time check."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from tensor_codec import versions
from tools import install_env as installer




def probe(**dists) -> dict:
    base = {"torch": None, "torchvision": None, "pyarrow": None, "numpy": "2.0.0", "setuptools": "80.0", "pip": "25.0"}
    base.update(dists)
    return {"executable": "/opt/torch/.venv/bin/python3", "version": [3, 12, 3], "sites": [], "dists": base, "has_pip": True}


SUPPORTED = {"torch": "2.11.0+cu130", "torchvision": "0.26.0+cu130", "pyarrow": "21.0.0"}


# ------------------------------------------------------------------------------ the version rule
def test_pyproject_declares_the_floors_the_code_checks():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = {}
    for dep in deps:
        match = re.fullmatch(r"([A-Za-z0-9_-]+)>=([0-9.]+)", dep)
        if match:
            declared[match.group(1)] = tuple(int(p) for p in match.group(2).split("."))
    assert {name: declared.get(name) for name in versions.MINIMUM} == versions.MINIMUM


@pytest.mark.parametrize(
    "found, expected",
    [
        ({"torch": "2.11.0"}, []),
        ({"torch": "2.11.0a0+ecf3bae40a.nv26.02"}, []),  # an NGC build of 2.11 is a 2.11
        ({"torch": "2.14.1+cu130", "torchvision": "0.29.1"}, []),
        ({"torch": "2.10.2"}, ["torch: expected torch >= 2.11, found torch 2.10.2"]),
        ({"torchvision": "0.25.0+cu128"}, ["torchvision: expected torchvision >= 0.26, found torchvision 0.25.0+cu128"]),
        ({"pyarrow": "14.0.2"}, ["pyarrow: expected pyarrow >= 15, found pyarrow 14.0.2"]),
        ({"torch": None}, ["torch: expected torch >= 2.11, found none installed"]),
        ({"torch": "unknown"}, ["torch: expected torch >= 2.11, found torch unknown"]),
        ({"numpy": "1.0"}, []),  # not one of the checked packages
    ],
)
def test_supported_versions(found, expected):
    assert versions.problems(found) == expected


def test_an_unsupported_torch_fails_at_import_naming_found_and_needed(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.9.1+cu126")
    with pytest.raises(ImportError, match=r"torch: expected torch >= 2.11, found torch 2.9.1\+cu126"):
        versions.require()


# -------------------------------------------------------------------------- the installer's choice
def test_a_supported_preinstalled_torch_is_used_where_it_is():
    assert installer.decide(probe(**SUPPORTED), named=True) == ("layered", [])
    assert installer.decide(probe(**SUPPORTED), named=False)[0] == "layered"


def test_an_interpreter_without_torch_gets_the_pinned_releases():
    assert installer.decide(probe(), named=True) == (
        "fresh", ["PYTHON=/opt/torch/.venv/bin/python3 has no torch (PYTHONPATH is not looked at): .venv gets the pinned torch"]
    )
    assert installer.decide(probe(), named=False) == ("fresh", [])


def test_a_requirement_is_named_as_pip_compares_names():
    assert [installer.requirement_name(t) for t in ("torchvision>=0.26", "dora_rs>=1.1,<1.2", "PyYAML >= 6", "a[x]>=1")] == [
        "torchvision", "dora-rs", "pyyaml", "a"
    ]


def test_a_venv_left_by_a_failed_layered_attempt_is_not_adopted(tmp_path):
    venv = tmp_path / ".venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    assert not installer.must_rebuild(venv, None, "fresh", "/usr/bin/python3")  # a .venv of the old Makefile
    (site / installer.PTH).write_text("")
    assert installer.must_rebuild(venv, None, "fresh", "/usr/bin/python3")
    stamp = {"mode": "layered", "python": "/opt/x/bin/python", "digest": "d", "missing": []}
    assert not installer.must_rebuild(venv, stamp, "layered", "/opt/x/bin/python")
    assert installer.must_rebuild(venv, stamp, "fresh", "/opt/x/bin/python")
    assert installer.must_rebuild(venv, stamp, "layered", "/opt/y/bin/python")


def test_missing_test_requirements_are_retried_only_when_they_could_be_had(tmp_path, monkeypatch):
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    stamp = {"mode": "layered", "python": "/opt/x/bin/python", "digest": "d", "missing": ["hypothesis>=6.100"]}
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert installer.up_to_date(stamp, "d", "/opt/x/bin/python", venv, None)  # offline, nothing new to look in
    assert not installer.up_to_date(stamp, "d", "/opt/x/bin/python", venv, "wheels")
    monkeypatch.delenv("PIP_NO_INDEX")
    assert not installer.up_to_date(stamp, "d", "/opt/x/bin/python", venv, None)  # an index to ask
    assert installer.up_to_date({**stamp, "missing": []}, "d", "/opt/x/bin/python", venv, None)
    assert not installer.up_to_date({**stamp, "missing": []}, "changed", "/opt/x/bin/python", venv, None)


def test_a_named_interpreter_with_an_old_torch_is_refused_clearly():
    with pytest.raises(installer.InstallError, match=r"(?s)PYTHON=/opt/torch/.venv/bin/python3 has releases this project does not support:"
                       r".*torch: expected torch >= 2.11, found torch 2.9.1.*leave PYTHON= out"):
        installer.decide(probe(**{**SUPPORTED, "torch": "2.9.1"}), named=True)


def test_the_default_interpreter_with_an_old_torch_is_left_alone():
    mode, notes = installer.decide(probe(**{**SUPPORTED, "torchvision": "0.20.0"}), named=False)
    assert mode == "fresh" and "torchvision: expected torchvision >= 0.26, found torchvision 0.20.0" in notes[0]


def test_a_named_interpreter_with_torch_but_no_torchvision_gets_it_in_the_venv():
    mode, notes = installer.decide(probe(torch="2.11.0", pyarrow="21.0"), named=True)
    assert mode == "layered" and notes == ["torchvision is not in PYTHON=/opt/torch/.venv/bin/python3: it is installed into .venv"]
    assert installer.decide(probe(torch="2.11.0", pyarrow="21.0"), named=False)[0] == "fresh"


def test_python_older_than_dora_supports_is_refused():
    with pytest.raises(installer.InstallError, match=r"is Python 3.10.12; the project needs Python >= 3.11"):
        installer.decide({**probe(**SUPPORTED), "version": [3, 10, 12]}, named=True)


def test_preinstalled_builds_are_pinned_so_pip_cannot_replace_them():
    assert installer.pins(probe(**SUPPORTED)) == [
        "torch==2.11.0+cu130", "torchvision==0.26.0+cu130", "pyarrow==21.0.0", "numpy==2.0.0"
    ]


def test_requirements_are_read_from_pyproject_runtime_and_test():
    reqs = dict(installer.requirements())
    assert reqs["dora-rs>=1.1,<1.2"] == "runtime" and reqs["pytest>=8"] == "test"
    assert all(group in ("runtime", "test") for group in reqs.values())


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


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_offline_install_over_this_interpreter_then_gpu_tests_collect_and_nodes_run(tmp_path):
    """This test's interpreter plays the GPU host's: it has torch, torchvision, pyarrow and dora.
    `PIP_NO_INDEX=1 make install PYTHON=<it>` in a fresh copy layers .venv over it, fetching
    nothing and installing no torch; then `make test-gpu` collects every gpu test and the
    console scripts run."""
    project = copy_of_the_project(tmp_path / "project")
    proc = run_make(project, "install", f"PYTHON={sys.executable}", env={"PIP_NO_INDEX": "1"})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert f"using torch {torch.__version__.split('+')[0]}" in output and ".venv ready (layered)" in output, output[-2000:]
    python = project / ".venv" / "bin" / "python"
    where = subprocess.run(
        [python, "-c", "import torch, tensor_codec, tensor_codec_nodes; print(torch.__file__); print(tensor_codec_nodes.__file__)"],
        cwd=tmp_path, capture_output=True, text=True,
    )
    assert where.returncode == 0, where.stderr[-2000:]
    torch_file, nodes_file = where.stdout.split()
    assert Path(torch_file) == Path(torch.__file__)  # the preinstalled torch, not a second copy
    assert Path(nodes_file) == project / "nodes" / "__init__.py"  # the copy's nodes, as an installed package
    assert not list((project / ".venv" / "lib").glob("python*/site-packages/torch"))

    # The console scripts are installed and run: a bad setting is reported before dora is needed.
    for script in ("tc-camera-source", "tc-tensor-sender", "tc-tensor-receiver", "tc-jpeg-encoder", "tc-jpeg-decoder", "tc-jpeg-sink"):
        assert (project / ".venv" / "bin" / script).exists(), script
    bad = subprocess.run([project / ".venv" / "bin" / "tc-tensor-sender"], env={**os.environ, "MODE": "bogus"}, capture_output=True, text=True)
    assert bad.returncode == 2 and "MODE: expected one of suite, random, safetensors, got 'bogus'" in bad.stderr

    # And they run a real dataflow with the dora the environment provides (linked into .venv/bin).
    bindir = project / ".venv" / "bin"
    flow = tmp_path / "flow" / "dataflow.yml"
    flow.parent.mkdir()
    flow.write_text(json.dumps({"nodes": [
        {"id": "sender", "path": str(bindir / "tc-tensor-sender"), "inputs": {"ack": "receiver/ack"}, "outputs": ["tensors"],
         "env": {"MODE": "random", "SIZES": "64KB", "COUNT": "3", "DEVICE": "cpu"}},
        {"id": "receiver", "path": str(bindir / "tc-tensor-receiver"), "inputs": {"tensors": "sender/tensors"}, "outputs": ["ack"],
         "env": {"DEVICE": "cpu", "STRICT": "1", "REPORT": "report.json"}},
    ]}))
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "UV_NO_PROJECT": "1"}
    env.pop("PYTHONPATH", None)
    ran = subprocess.run([bindir / "dora", "run", flow], cwd=flow.parent, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    assert json.loads((flow.parent / "report.json").read_text())["inputs"]["tensors"]["good"] == 3

    # A second `make` (no PYTHON=) keeps the layered .venv and does nothing.
    again = run_make(project, "install", env={"PIP_NO_INDEX": "1"})
    assert again.returncode == 0 and again.stdout.strip() == "", again.stdout + again.stderr

    # Every gpu test is collected there, as here.
    here = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True)
    expected = int(re.search(r"(\d+)/\d+ tests collected", here.stdout).group(1))
    if torch.cuda.is_available():
        gpu = run_make(project, "test-gpu", "PYTEST_ARGS=--collect-only -p no:cacheprovider", env={"PIP_NO_INDEX": "1"})
        assert gpu.returncode == 0 and f"{expected}/" in gpu.stdout, gpu.stdout[-3000:]
    else:
        gpu = run_make(project, "test-gpu", "PYTEST_ARGS=-p no:cacheprovider", env={"PIP_NO_INDEX": "1"})
        assert gpu.returncode == 0, gpu.stdout[-3000:] + gpu.stderr[-2000:]
        assert re.search(rf"\b{expected} skipped\b", gpu.stdout), gpu.stdout[-3000:]
