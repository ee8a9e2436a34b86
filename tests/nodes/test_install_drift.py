"""Drift repair over a preinstalled environment removes only what .venv owns.

A layered .venv (tools/install_env.py) sees the underlying environment's packages through a .pth
file; drift is .venv's own copy of one of its pins at another release, and the repair removes
that copy. It used `pip uninstall`, whose check that a copy is its environment's compares paths as
strings: an environment at .venv-floor beside .venv counted as inside, and where .venv's dist-info
could not be read pip removed the underlying copy. These tests build both environments as plain
folders and call the repair with pip stubbed out: nothing may run it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tools import install_env as installer

SITE = Path("lib") / "python3.12" / "site-packages"
BASE_PYTHON = "/opt/base/bin/python"


def install(site: Path, version: str, metadata: bool = True) -> Path:
    """fakepkg at `version` in `site`, as pip leaves it: a module, a subpackage, a script in the
    environment's bin/ and a RECORD listing them; -> its dist-info folder."""
    info = site / f"fakepkg-{version}.dist-info"
    files = {
        "fakepkg/__init__.py": f"VERSION = {version!r}\n",
        "fakepkg/sub/mod.py": "",
        "../../../bin/fakepkg-cli": "#!/bin/sh\n",
        f"{info.name}/INSTALLER": "pip\n",
    }
    if metadata:
        files[f"{info.name}/METADATA"] = f"Metadata-Version: 2.1\nName: fakepkg\nVersion: {version}\n"
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    (info / "RECORD").write_text("".join(f"{path},sha256=x,1\n" for path in files) + f"{info.name}/RECORD,,\n")
    return info


def tree(folder: Path) -> dict[str, str]:
    """Every file and link under `folder` (relative path -> content, or where a link points)."""
    return {
        str(p.relative_to(folder)): os.readlink(p) if p.is_symlink() else p.read_text(errors="replace")
        for p in sorted(folder.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def layered(tmp_path: Path, metadata: bool = True) -> tuple[Path, Path, Path]:
    """(.venv, its site-packages, the base's site-packages): a base environment at .venv-floor
    beside .venv (a path that starts with .venv's as a string) holding fakepkg 1.0, and .venv
    layered over it holding its own fakepkg 2.0 where its pins say 1.0."""
    base = tmp_path / ".venv-floor" / SITE
    install(base, "1.0")
    venv = tmp_path / ".venv"
    site = venv / SITE
    install(site, "2.0", metadata)
    (site / "fakepkg" / "__pycache__").mkdir()
    (site / "fakepkg" / "__pycache__" / "__init__.cpython-312.pyc").write_bytes(b"compiled after the install")
    (site / installer.PTH).write_text(f"import site; site.addsitedir({str(base)!r})\n")
    (venv / installer.PINS).write_text("fakepkg==1.0\n")
    return venv, site, base


class NoPip:
    """installer.run: records what would have run, and says it succeeded (as pip does where it
    refuses a copy outside its environment); the repair over a layered .venv runs nothing."""

    def __init__(self):
        self.commands: list[list[str]] = []

    def __call__(self, cmd, *, capture=False, check=True):
        self.commands.append([str(c) for c in cmd])
        return subprocess.CompletedProcess(cmd, 0, "", "")


@pytest.fixture
def no_pip(monkeypatch) -> NoPip:
    pip = NoPip()
    monkeypatch.setattr(installer, "run", pip)
    return pip


def drifted(venv: Path) -> list[tuple[str, str, str]]:
    return installer.drift(venv, installer.drift_pins(venv, "layered"))


@pytest.mark.parametrize("metadata", [True, False], ids=["readable", "without-METADATA"])
def test_a_base_at_venv_floor_keeps_its_copy_and_the_venvs_own_is_removed(tmp_path, no_pip, metadata):
    """Without METADATA (pip cannot read that dist-info: it found the base's copy by name and
    removed it) the copy is still .venv's by its folder, and its RECORD still lists its files."""
    venv, site, base = layered(tmp_path, metadata)
    before = tree(base)
    assert drifted(venv) == [("fakepkg", "1.0", "2.0")]

    installer.repair_drift(venv, None, "layered", drifted(venv))

    assert tree(base) == before
    assert not (site / "fakepkg").exists() and not (site / "fakepkg-2.0.dist-info").exists()
    assert not (venv / "bin" / "fakepkg-cli").exists() and (venv / "bin").is_dir()  # bin/ is not site-packages'
    assert (site / installer.PTH).exists() and (venv / installer.PINS).exists()  # the installer's own, kept
    assert drifted(venv) == []  # the next make finds nothing to repair
    assert no_pip.commands == []


HOSTILE_RECORDS = {
    "no-RECORD": (None, r"fakepkg-2\.0\.dist-info has no RECORD as a plain file"),
    "undecodable": (b"\xff\xfe\x00\x81 not text", r"RECORD cannot be read"),
    "not-csv-rows": (b"this is not a record\n", r"RECORD row 1: expected `path,hash,size`, got 'this is not a record'"),
    "empty": (b"", r"RECORD lists no files"),
    "base-by-dotdot": (
        b"fakepkg/__init__.py,,\n../../../../.venv-floor/lib/python3.12/site-packages/fakepkg/__init__.py,,\n",
        r"RECORD lists '\.\./\.\./\.\./\.\./\.venv-floor/lib/python3\.12/site-packages/fakepkg/__init__\.py', "
        r"which is not inside .*\.venv\.",
    ),
    "base-absolute": ("{base}/fakepkg/__init__.py,,\n", r"RECORD lists '/.*/\.venv-floor/.*', which is not inside"),
    "dotdot-name": (b"fakepkg/..,,\n", r"RECORD lists 'fakepkg/\.\.': not a file"),
    "through-a-linked-folder": (
        b"fakepkg/__init__.py,,\nlinked/__init__.py,,\n",
        r"RECORD lists 'linked/__init__\.py'",
    ),
}


@pytest.mark.parametrize("case", HOSTILE_RECORDS)
def test_a_record_that_cannot_be_trusted_removes_nothing_and_says_how_to_make_venv_again(tmp_path, no_pip, case):
    venv, site, base = layered(tmp_path)
    (site / "linked").symlink_to(base / "fakepkg", target_is_directory=True)  # a folder inside, leading outside
    content, error = HOSTILE_RECORDS[case]
    record = site / "fakepkg-2.0.dist-info" / "RECORD"
    record.unlink()
    if isinstance(content, str):
        content = content.format(base=base).encode()
    if content is not None:
        record.write_bytes(content)
    before_base, before_venv = tree(base), tree(venv)

    with pytest.raises(installer.InstallError, match=error) as raised:
        installer.repair_drift(venv, None, "layered", drifted(venv))

    assert tree(base) == before_base and tree(venv) == before_venv  # nothing, inside or out
    assert no_pip.commands == []
    assert "Nothing was removed; .venv's copy is not guessed at" in str(raised.value)
    assert f"`rm -rf {venv}` then `make install PYTHON=<the interpreter it is layered over>`" in str(raised.value)


def test_a_listed_link_to_a_file_outside_is_removed_as_a_link_and_its_target_kept(tmp_path, no_pip):
    venv, site, base = layered(tmp_path)
    target = base / "fakepkg" / "__init__.py"
    (site / "fakepkg" / "data.bin").symlink_to(target)
    with (site / "fakepkg-2.0.dist-info" / "RECORD").open("a") as f:
        f.write("fakepkg/data.bin,,\n")
    before = tree(base)

    installer.repair_drift(venv, None, "layered", drifted(venv))

    assert not (site / "fakepkg" / "data.bin").is_symlink() and not (site / "fakepkg").exists()
    assert target.read_text() == "VERSION = '1.0'\n" and tree(base) == before
    assert drifted(venv) == [] and no_pip.commands == []


# ------------------------------------------------------------------------ make install's no-op path
def up_to_date_layered(tmp_path: Path) -> tuple[Path, Path]:
    """layered(), with a record that says .venv is up to date with this checkout."""
    venv, site, base = layered(tmp_path)
    (venv / "bin" / "python").write_text("")
    stamp = {
        "mode": "layered",
        "python": BASE_PYTHON,
        "named": True,
        "digest": installer.inputs_digest(),
        "constraints": installer.CONSTRAINTS,
        "dists": {},
        "missing": [],
        "optional_missing": [],
    }
    (venv / installer.STAMP).write_text(json.dumps(stamp))
    return venv, base


@pytest.fixture
def stubbed_install(monkeypatch, no_pip) -> list[str]:
    """main's install steps stubbed: -> the names of those that ran."""
    steps: list[str] = []

    def step(name, result=None):
        return lambda *args, **kwargs: steps.append(name) or result

    supported = {"torch": "2.11.0", "torchvision": "0.26.0", "pyarrow": "21.0.0", "numpy": "2.0.0"}
    monkeypatch.setattr(
        installer,
        "probe_interpreter",
        lambda python: {"executable": python, "version": [3, 12, 3], "sites": [], "dists": supported, "has_pip": True},
    )
    for name, result in (("install_layered", []), ("install_optional", []), ("install_hub_nodes", [])):
        monkeypatch.setattr(installer, name, step(name, result))
    for name in ("link_dora_cli", "link_hub_scripts"):
        monkeypatch.setattr(installer, name, step(name))
    monkeypatch.setattr(installer, "verify", step("verify", "summary"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    return steps


def test_make_install_repairs_a_layered_drift_once_and_the_next_make_does_nothing(tmp_path, stubbed_install, capsys):
    venv, base = up_to_date_layered(tmp_path)
    before = tree(base)
    assert installer.main(["--venv", str(venv)]) == 0
    assert "install: .venv drifted from the interpreter .venv is layered over: fakepkg 2.0 (pinned 1.0)" in (
        capsys.readouterr().out
    )
    assert "install_layered" in stubbed_install and tree(base) == before

    stubbed_install.clear()
    assert installer.main(["--venv", str(venv)]) == 0
    assert stubbed_install == [] and capsys.readouterr().out == ""


def test_make_install_with_a_drift_it_cannot_repair_fails_every_time_saying_what_to_do(
    tmp_path, stubbed_install, capsys
):
    venv, base = up_to_date_layered(tmp_path)
    (venv / SITE / "fakepkg-2.0.dist-info" / "RECORD").unlink()
    before_base, before_venv = tree(base), tree(venv)
    for _ in range(2):  # not once and then silence: every make says it
        assert installer.main(["--venv", str(venv)]) == 1
        err = capsys.readouterr().err
        assert "install: FAILED: " in err and "has no RECORD" in err, err
        assert f"`rm -rf {venv}` then `make install PYTHON={BASE_PYTHON}`" in err
    assert stubbed_install == []  # nothing installed over a .venv whose copy still hides the base's
    assert tree(base) == before_base and tree(venv) == before_venv
