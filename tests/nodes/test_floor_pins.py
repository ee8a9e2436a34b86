"""The oldest supported releases, as `make test-floor` installs them (.venv-floor, CI): the pins of
constraints-floor.txt are the floors the code states (tensor_codec/versions.py's MINIMUM and
pyproject.toml's `>=`), its other pins are constraints.txt's, and the installer puts them into the
venv it is told to (--constraints, --fresh)."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from tensor_codec import versions
from tests.support.paths import ROOT
from tools import install_env as installer

FLOOR = "constraints-floor.txt"
# What the floor environment holds at its floor; every other pin is constraints.txt's.
AT_THEIR_FLOOR = {"torch", "torchvision", "torchcodec", "pyarrow"}


def declared_floors() -> dict[str, tuple[int, ...]]:
    """name -> release of each `name>=X` of pyproject's runtime dependencies."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {}
    for dep in deps:
        match = re.fullmatch(r"([A-Za-z0-9_-]+)>=([0-9.]+)(,.*)?", dep)
        if match:
            floors[installer.requirement_name(match.group(1))] = versions.release(match.group(2))
    return floors


def pinned_release(pin: str) -> tuple[int, ...]:
    return versions.release(pin.split("==", 1)[1])


def padded(numbers: tuple[int, ...], width: int = 3) -> tuple[int, ...]:
    return numbers + (0,) * (width - len(numbers))


def test_the_floor_pins_are_the_floors_the_code_states():
    floor = installer.constraint_pins(ROOT / FLOOR)
    declared = declared_floors()
    assert AT_THEIR_FLOOR <= set(floor) and AT_THEIR_FLOOR <= set(declared)
    for name in AT_THEIR_FLOOR:
        # The first release of the floor (2.11 -> 2.11.0): what pip gives for `>=2.11` at the oldest.
        assert padded(pinned_release(floor[name])) == padded(declared[name]), floor[name]
    for name, minimum in versions.MINIMUM.items():
        if name in floor:
            assert padded(pinned_release(floor[name])) == padded(minimum), floor[name]
    assert {"torch", "torchvision", "pyarrow"} <= set(versions.MINIMUM)


def test_the_other_floor_pins_are_the_default_ones():
    floor = installer.constraint_pins(ROOT / FLOOR)
    default = installer.constraint_pins(ROOT / "constraints.txt")
    assert set(floor) - AT_THEIR_FLOOR == set(default) - AT_THEIR_FLOOR
    assert {name: pin for name, pin in floor.items() if name not in AT_THEIR_FLOOR} == {
        name: pin for name, pin in default.items() if name not in AT_THEIR_FLOOR
    }
    # Else the floor run tests nothing new (pyarrow: constraints.txt leaves it to pip, the newest).
    assert all(floor[name] != default.get(name) for name in AT_THEIR_FLOOR)


def test_make_test_floor_installs_with_the_floor_pins_into_its_own_venv():
    makefile = (ROOT / "Makefile").read_text()
    assert f"--constraints {FLOOR} --fresh" in makefile and "--venv $(FLOOR_VENV)" in makefile
    assert re.search(r"^FLOOR_VENV\s*:=\s*\.venv-floor$", makefile, re.M)
    assert ".venv-floor/" in (ROOT / ".gitignore").read_text().splitlines()
    assert "make test-floor" in (ROOT / ".ci" / "run").read_text()


def fake_steps(monkeypatch, probe_dists: dict, seen: dict) -> None:
    monkeypatch.setattr(installer, "CONSTRAINTS", installer.CONSTRAINTS)  # main sets it: restored after the test
    monkeypatch.setattr(installer, "read_stamp", lambda venv: None)
    monkeypatch.setattr(installer, "which_outside", lambda python, venv: "/usr/bin/python3")
    dists = {"torch": None, "torchvision": None, "pyarrow": None, "numpy": "2.0.0", "setuptools": "80", "pip": "25"}
    probe = {"executable": "/usr/bin/python3", "version": [3, 11, 7], "sites": [], "has_pip": True}
    monkeypatch.setattr(installer, "probe_interpreter", lambda python: {**probe, "dists": {**dists, **probe_dists}})
    monkeypatch.setattr(installer, "must_rebuild", lambda *args: False)

    def install_fresh(python, venv, wheels):
        seen["fresh"] = installer.ROOT / installer.CONSTRAINTS
        seen["pins"] = installer.constraint_pins()

    monkeypatch.setattr(installer, "install_fresh", install_fresh)
    monkeypatch.setattr(installer, "install_layered", lambda *args: pytest.fail("layered over the interpreter's torch"))
    monkeypatch.setattr(
        installer, "install_optional", lambda venv, wheels, reqs: seen.setdefault("optional", reqs) and []
    )
    monkeypatch.setattr(installer, "install_hub_nodes", lambda *args: [])
    monkeypatch.setattr(installer, "verify", lambda venv: "summary")


def test_the_installer_makes_a_fresh_venv_with_the_constraints_it_is_given(tmp_path, monkeypatch, capsys):
    seen: dict = {}
    fake_steps(monkeypatch, {}, seen)
    default_digest = installer.inputs_digest()
    venv = tmp_path / ".venv-floor"
    venv.mkdir()
    assert installer.main(["--venv", str(venv), "--constraints", FLOOR, "--fresh"]) == 0
    assert seen["fresh"] == ROOT / FLOOR
    assert seen["pins"]["torch"] == "torch==2.11.0"
    assert "rerun-sdk==0.41.0" in seen["optional"]  # the optional extras at the same file's pins
    stamp = json.loads((venv / installer.STAMP).read_text())
    assert stamp["constraints"] == FLOOR and stamp["digest"] == installer.inputs_digest() != default_digest
    assert "install: .venv-floor ready (fresh): summary" in capsys.readouterr().out


def test_fresh_leaves_the_interpreters_own_torch_alone(tmp_path, monkeypatch, capsys):
    seen: dict = {}
    fake_steps(monkeypatch, {"torch": "2.14.1", "torchvision": "0.29.1", "pyarrow": "21.0.0"}, seen)
    venv = tmp_path / ".venv-floor"
    venv.mkdir()
    assert installer.main(["--venv", str(venv), "--constraints", FLOOR, "--fresh", "--named"]) == 0
    assert seen["fresh"] == ROOT / FLOOR
    out = capsys.readouterr().out
    assert f"torch 2.14.1 of /usr/bin/python3 not used (--fresh): .venv-floor gets the releases {FLOOR} pins" in out


def test_a_constraints_file_that_is_not_there_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(installer, "CONSTRAINTS", installer.CONSTRAINTS)
    monkeypatch.setattr(installer, "probe_interpreter", lambda python: pytest.fail("went on without its pins"))
    assert installer.main(["--venv", str(tmp_path / "v"), "--constraints", "constraints-absent.txt"]) == 1
    assert "install: FAILED: no constraints file" in capsys.readouterr().err
