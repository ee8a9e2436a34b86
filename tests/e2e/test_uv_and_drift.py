"""uv on PATH and an environment that drifted from its pins.

dora 1.1 resolves a node `path:` that is not a file (the tc-* console scripts) with `uv run which
<name>` when uv is on PATH (dora-rs-cli installs uv beside .venv's python). Run from this project
without UV_NO_PROJECT=1, uv took pyproject.toml for a uv project: it wrote uv.lock and synced .venv
away from constraints.txt (torch 2.14.1 -> 2.15.0). pyproject's `[tool.uv] managed = false` stops
that: the first test makes that call with the real uv, offline, in a copy of the project.

`make install` with unchanged inputs did nothing and left such a drift in place; it now compares
what .venv has of its pins and puts them back (tools/install_env.py: drift, repair_drift): the
other tests, with a real pip and two builds of a tiny package, and main's no-op path with its
install steps stubbed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.wheels import tiny_wheel
from tools import install_env as installer


# ------------------------------------------------------------------------------------- uv run
def uv_executable() -> str | None:
    """The uv that dora finds: beside this interpreter (dora-rs-cli installs it there), or on PATH."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


def tree(folder: Path) -> dict[str, int]:
    """Every file under `folder` (relative path -> size): what an install or a sync would change."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.skipif(uv_executable() is None, reason="needs uv (dora-rs-cli installs it)")
def test_uv_run_which_as_dora_calls_it_neither_locks_nor_syncs_the_project(tmp_path):
    project = tmp_path / "project"
    (project / "examples").mkdir(parents=True)
    shutil.copy2(ROOT / "pyproject.toml", project / "pyproject.toml")
    venv = project / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    before = tree(venv)
    # As a user's shell has it: no UV_NO_PROJECT (nor any other uv setting), uv's cache a fresh one
    # (offline, nothing to lock with: only what the project's setting decides is tested).
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "XDG_CONFIG_HOME")
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") and k not in drop}
    env.update(UV_OFFLINE="1", UV_CACHE_DIR=str(tmp_path / "uv-cache"), HOME=str(tmp_path))
    env["PATH"] = os.pathsep.join([str(Path(uv_executable()).parent), env.get("PATH", "")])
    for cwd in (project, project / "examples"):  # the project's root, and a dataflow's folder in it
        proc = subprocess.run(
            [uv_executable(), "run", "which", "python"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, f"`uv run which python` in {cwd.name}/ failed:\n{proc.stderr}"
        assert Path(proc.stdout.strip()).parent.resolve() == (venv / "bin").resolve(), proc.stdout  # .venv as it is
    assert not (project / "uv.lock").exists()
    assert not list(project.rglob("uv.lock"))
    assert tree(venv) == before  # nothing installed, removed or rewritten


def test_the_project_tells_uv_it_is_not_a_uv_project():
    import tomllib

    uv = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("tool", {}).get("uv", {})
    assert uv.get("managed") is False


# -------------------------------------------------------------------------------------- drift
@pytest.mark.parametrize(
    ("pinned", "found", "same"),
    [
        ("2.14.1", "2.14.1", True),
        ("2.14.1", "2.14.1+cu130", True),  # pip's ==2.14.1 takes any local build of it
        ("2.14", "2.14.0", True),
        ("0.9.0.20", "0.9.0.20", True),
        ("2.14.1", "2.15.0", False),
        ("0.29.1", "0.29.2", False),
        ("2.14.1+cu130", "2.14.1+cpu", False),
        ("2.14.1+cu130", "2.14.1", False),
        ("1.0", "1.0rc1", False),
        ("1.0rc1", "1.0.RC1", True),
    ],
)
def test_a_release_meets_its_pin_as_pip_reads_it(pinned, found, same):
    assert installer.matches_pin(pinned, found) is same


def dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_only_what_the_venv_itself_holds_is_compared(tmp_path):
    venv, base = tmp_path / ".venv", tmp_path / "base-site-packages"
    site = venv / "lib" / "python3.11" / "site-packages"
    dist_info(site, "torch", "2.15.0")
    dist_info(site, "rerun-sdk", "0.41.0")
    dist_info(base, "torchvision", "0.30.0")  # an underlying environment's: not .venv's to repair
    (site / "_tc_preinstalled.pth").write_text(f"import site; site.addsitedir({str(base)!r})\n")
    pinned = {"torch": "2.14.1", "torchvision": "0.29.1", "rerun-sdk": "0.41.0", "ruff": "0.17.6"}
    assert installer.drift(venv, pinned) == [("torch", "2.14.1", "2.15.0")]
    assert installer.drift(tmp_path / "none", pinned) == []


def test_a_fresh_venv_is_held_to_the_constraints_file_a_layered_one_to_the_builds_under_it(tmp_path):
    (tmp_path / installer.PINS).write_text("torch==2.13.0\nnumpy==2.1.0\n")
    assert installer.drift_pins(tmp_path, "layered") == {"torch": "2.13.0", "numpy": "2.1.0"}
    fresh = installer.drift_pins(tmp_path, "fresh")
    assert fresh == {
        name: text.split("==")[1] for name, text in installer.constraint_pins(ROOT / installer.CONSTRAINTS).items()
    }
    assert "torch" in fresh


@pytest.mark.slow
def test_a_drifted_pin_is_found_named_and_put_back_offline(tmp_path, monkeypatch, capsys):
    """A real venv and pip, offline: the package installed at 2.0 where the constraints pin 1.0."""
    name = "tc-drift-probe"
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, name, "1.0")
    tiny_wheel(wheels, name, "2.0")
    venv = tmp_path / ".venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheels)]
    subprocess.run([*pip, f"{name}==2.0"], check=True, capture_output=True)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"{name}==1.0\n")
    # The installer reads its constraints file relative to the checkout: ROOT and CONSTRAINTS name this one.
    monkeypatch.setattr(installer, "ROOT", tmp_path)
    monkeypatch.setattr(installer, "CONSTRAINTS", constraints.name)
    monkeypatch.setenv("PIP_NO_INDEX", "1")

    drifted = installer.drift(venv, installer.drift_pins(venv, "fresh"))
    assert drifted == [(name, "1.0", "2.0")]
    line = installer.drift_message(venv, "fresh", drifted)
    assert f"{name} 2.0 (pinned 1.0)" in line and "constraints.txt" in line and "\n" not in line

    installer.repair_drift(venv, str(wheels), "fresh", drifted)
    assert installer.drift(venv, installer.drift_pins(venv, "fresh")) == []
    assert installer.installed_versions(venv, [name]) == {name: "1.0"}

    # Layered: .venv's own copy is removed (what the underlying environment has shows again).
    subprocess.run([*pip, f"{name}==2.0"], check=True, capture_output=True)
    (venv / installer.PINS).write_text(f"{name}==1.0\n")
    drifted = installer.drift(venv, installer.drift_pins(venv, "layered"))
    assert drifted == [(name, "1.0", "2.0")]
    installer.repair_drift(venv, str(wheels), "layered", drifted)
    assert installer.installed_versions(venv, [name]) == {name: None}


# ------------------------------------------------------------------------ make install's no-op path
def up_to_date_venv(tmp_path: Path, torch: str) -> Path:
    """A .venv whose record says it is up to date with this checkout, holding torch `torch`."""
    venv = tmp_path / ".venv"
    dist_info(venv / "lib" / "python3.11" / "site-packages", "torch", torch)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    stamp = {
        "mode": "fresh",
        "python": "/opt/python3/bin/python3",
        "named": False,
        "digest": installer.inputs_digest(),
        "constraints": installer.CONSTRAINTS,
        "dists": {},
        "missing": [],
        "optional_missing": [],
    }
    (venv / installer.STAMP).write_text(json.dumps(stamp))
    return venv


def stub_install_steps(monkeypatch, steps: list) -> None:
    def step(name, result=None):
        def record(*args, **kwargs):
            steps.append((name, args))
            return result

        return record

    def probe(python):
        steps.append(("probe", (python,)))
        return {"executable": python, "version": [3, 11, 7], "sites": [], "dists": {}, "has_pip": True}

    monkeypatch.setattr(installer, "probe_interpreter", probe)
    monkeypatch.setattr(installer, "install_fresh", step("project"))
    monkeypatch.setattr(installer, "install_optional", step("optional", []))
    monkeypatch.setattr(installer, "install_hub_nodes", step("hub nodes", []))
    monkeypatch.setattr(installer, "verify", step("verify", "summary"))
    # raising=False: the same test shows an installer without the repair doing nothing.
    monkeypatch.setattr(installer, "repair_drift", step("repair"), raising=False)


def test_make_install_with_unchanged_inputs_repairs_a_drifted_venv(tmp_path, monkeypatch, capsys):
    pinned = installer.constraint_pins()["torch"].split("==")[1]
    venv = up_to_date_venv(tmp_path, "99.0.0")
    steps: list = []
    stub_install_steps(monkeypatch, steps)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert installer.main(["--venv", str(venv)]) == 0
    out = capsys.readouterr().out
    drift_line = [line for line in out.splitlines() if "drifted" in line]
    assert len(drift_line) == 1 and f"torch 99.0.0 (pinned {pinned})" in drift_line[0], out
    names = [name for name, _ in steps]
    assert names == ["probe", "repair", "project", "optional", "hub nodes", "verify"]  # the pins, then the install
    assert steps[1][1][2:] == ("fresh", [("torch", pinned, "99.0.0")])
    assert json.loads((venv / installer.STAMP).read_text())["digest"] == installer.inputs_digest()  # recorded


def test_make_install_with_unchanged_inputs_and_the_pins_in_place_does_nothing(tmp_path, monkeypatch, capsys):
    pinned = installer.constraint_pins()["torch"].split("==")[1]
    venv = up_to_date_venv(tmp_path, f"{pinned}+cu130")
    steps: list = []
    stub_install_steps(monkeypatch, steps)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert installer.main(["--venv", str(venv)]) == 0
    assert steps == [] and capsys.readouterr().out == ""
