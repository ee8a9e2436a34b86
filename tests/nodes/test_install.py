"""Installing over an interpreter that already has torch (GPU hosts, containers), offline, and the
supported-version rule shared by the installer, pyproject.toml and the import-time check (the
installer's decisions, with fakes; a real offline install: tests/e2e/test_install_e2e.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import torch

from tensor_codec import versions
from tests.support.paths import ROOT
from tools import install_env as installer


def probe(**dists) -> dict:
    base = {"torch": None, "torchvision": None, "pyarrow": None, "numpy": "2.0.0", "setuptools": "80.0", "pip": "25.0"}
    base.update(dists)
    return {
        "executable": "/opt/torch/.venv/bin/python3",
        "version": [3, 12, 3],
        "sites": [],
        "dists": base,
        "has_pip": True,
    }


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
        (
            {"torchvision": "0.25.0+cu128"},
            ["torchvision: expected torchvision >= 0.26, found torchvision 0.25.0+cu128"],
        ),
        ({"pyarrow": "15.0.2"}, ["pyarrow: expected pyarrow >= 16, found pyarrow 15.0.2"]),
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
        "fresh",
        ["PYTHON=/opt/torch/.venv/bin/python3 has no torch (PYTHONPATH is not looked at): .venv gets the pinned torch"],
    )
    assert installer.decide(probe(), named=False) == ("fresh", [])


def test_a_requirement_is_named_as_pip_compares_names():
    assert [
        installer.requirement_name(t) for t in ("torchvision>=0.26", "dora_rs>=1.1,<1.2", "PyYAML >= 6", "a[x]>=1")
    ] == ["torchvision", "dora-rs", "pyyaml", "a"]


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
    with pytest.raises(
        installer.InstallError,
        match=r"(?s)PYTHON=/opt/torch/.venv/bin/python3 has releases this project does not support:"
        r".*torch: expected torch >= 2.11, found torch 2.9.1.*leave PYTHON= out",
    ):
        installer.decide(probe(**{**SUPPORTED, "torch": "2.9.1"}), named=True)


def test_the_default_interpreter_with_an_old_torch_is_left_alone():
    mode, notes = installer.decide(probe(**{**SUPPORTED, "torchvision": "0.20.0"}), named=False)
    assert mode == "fresh" and "torchvision: expected torchvision >= 0.26, found torchvision 0.20.0" in notes[0]


def test_a_named_interpreter_with_torch_but_no_torchvision_gets_it_in_the_venv():
    mode, notes = installer.decide(probe(torch="2.11.0", pyarrow="21.0"), named=True)
    assert mode == "layered" and notes == [
        "torchvision is not in PYTHON=/opt/torch/.venv/bin/python3: it is installed into .venv"
    ]
    assert installer.decide(probe(torch="2.11.0", pyarrow="21.0"), named=False)[0] == "fresh"


def test_python_older_than_dora_supports_is_refused():
    with pytest.raises(installer.InstallError, match=r"is Python 3.10.12; the project needs Python >= 3.11"):
        installer.decide({**probe(**SUPPORTED), "version": [3, 10, 12]}, named=True)


def test_preinstalled_builds_are_pinned_so_pip_cannot_replace_them():
    assert installer.pins(probe(**SUPPORTED)) == [
        "torch==2.11.0+cu130",
        "torchvision==0.26.0+cu130",
        "pyarrow==21.0.0",
        "numpy==2.0.0",
    ]


def test_requirements_are_read_from_pyproject_runtime_and_test():
    reqs = dict(installer.requirements())
    assert reqs["dora-rs>=1.1,<1.2"] == "runtime" and reqs["pytest>=8"] == "test"
    assert reqs["torchcodec>=0.16"] == "fallback"  # a runtime requirement the JPEG nodes can do without
    assert all(group in ("runtime", "fallback", "test") for group in reqs.values())


# ------------------------------------------------------------------- hub nodes (examples/)
HUB_LIST = ROOT / "examples" / "hub-nodes.txt"


def test_the_hub_nodes_are_pinned_and_say_which_install_without_their_dependencies():
    assert installer.hub_nodes() == [
        ("dora-opencv-image-splitter==0.1.0", False),  # its dependencies are the project's own
        ("dora-echo==0.5.0", True),  # pins numpy<2
        ("dora-camera-opencv==0.0.1", True),  # pins dora-rs<0.4
    ]
    text = HUB_LIST.read_text()
    assert "numpy<2" in text and "dora-rs<0.4" in text  # the reasons, said where the choice is made


@pytest.mark.parametrize(
    "line, error",
    [
        (
            "dora-echo>=0.5",
            r"hub-nodes.txt line 2: expected a hub node pinned as <name>==<version>, got 'dora-echo>=0.5'",
        ),
        ("dora-echo", r"line 2: expected a hub node pinned as <name>==<version>, got 'dora-echo'"),
        (
            "dora-echo==0.5.0 --force-reinstall",
            r"line 2: expected nothing or `--no-deps` after dora-echo==0.5.0, got '--force-reinstall'",
        ),
        ("dora-echo==0.5.0 --no-deps --no-deps", r"got '--no-deps --no-deps'"),
    ],
)
def test_a_hub_list_that_says_something_else_is_refused(tmp_path, line, error):
    path = tmp_path / "hub-nodes.txt"
    path.write_text(f"# a comment\n{line}  # why\n")
    with pytest.raises(installer.InstallError, match=error):
        installer.hub_nodes(path)


def test_no_hub_list_installs_no_hub_node(tmp_path):
    assert installer.hub_nodes(tmp_path / "absent.txt") == []


def test_an_edit_of_the_hub_list_installs_again(tmp_path, monkeypatch):
    for name in ("pyproject.toml", "constraints.txt", installer.HUB_NODES, "tools/install_env.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    monkeypatch.setattr(installer, "ROOT", tmp_path)
    before = installer.inputs_digest()
    with (tmp_path / installer.HUB_NODES).open("a") as f:
        f.write("dora-rerun==0.5.0\n")
    assert installer.inputs_digest() != before


class FakePip:
    """installer.run for pip commands: records them, fails those naming a requirement in `fail`."""

    def __init__(self, fail=()):
        self.fail = set(fail)
        self.commands: list[list[str]] = []

    def __call__(self, cmd, *, capture=False, check=True):
        cmd = [str(c) for c in cmd]
        self.commands.append(cmd)
        if cmd[-1] in self.fail:
            stderr = (
                f"ERROR: Could not find a version that satisfies the requirement {cmd[-1]} (from versions: none)\n"
                f"ERROR: No matching distribution found for {cmd[-1]}\n"
            )
            return subprocess.CompletedProcess(cmd, 1, "", stderr)
        return subprocess.CompletedProcess(cmd, 0, "", "")


HAS = {"torch": "2.14.1", "torchvision": "0.29.1", "pyarrow": "26.0.1", "numpy": "2.4.6", "dora-rs": "1.1.0"}


@pytest.fixture
def fake_venv(tmp_path, monkeypatch):
    """install_hub_nodes against a .venv that has HAS and none of the hub nodes."""
    monkeypatch.setattr(installer, "installed_versions", lambda venv, names: {n: HAS.get(n) for n in names})
    monkeypatch.setattr(installer, "unmet", lambda venv, reqs: [(text, group, None) for text, group in reqs])
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    return tmp_path


def test_hub_nodes_install_held_to_what_the_venv_has(fake_venv, monkeypatch, capsys):
    pip = FakePip()
    monkeypatch.setattr(installer, "run", pip)
    assert installer.install_hub_nodes(fake_venv, None, installer.hub_nodes()) == []
    pins = fake_venv / installer.HUB_PINS
    # numpy 2, pyarrow, torch and dora-rs 1.1 stay: dora-echo's numpy<2 or the camera's
    # dora-rs<0.4 can never replace them, even where a node is installed with its dependencies.
    assert pins.read_text().splitlines() == [
        "torch==2.14.1",
        "torchvision==0.29.1",
        "pyarrow==26.0.1",
        "numpy==2.4.6",
        "dora-rs==1.1.0",
    ]
    installed = {cmd[-1]: cmd for cmd in pip.commands}
    assert list(installed) == ["dora-opencv-image-splitter==0.1.0", "dora-echo==0.5.0", "dora-camera-opencv==0.0.1"]
    for text, cmd in installed.items():
        assert cmd[1:4] == ["-m", "pip", "install"] and cmd[cmd.index("-c") + 1] == str(pins), cmd
        assert ("--no-deps" in cmd) == (text != "dora-opencv-image-splitter==0.1.0"), cmd
    out = capsys.readouterr().out
    assert (
        "hub node dora-echo==0.5.0: installed without its dependencies (--no-deps: see examples/hub-nodes.txt)" in out
    )
    assert "hub node dora-opencv-image-splitter==0.1.0: installed\n" in out


def test_hub_nodes_already_there_are_left_alone(fake_venv, monkeypatch):
    pip = FakePip()
    monkeypatch.setattr(installer, "run", pip)
    monkeypatch.setattr(
        installer, "unmet", lambda venv, reqs: [(t, g, None) for t, g in reqs if t.startswith("dora-echo")]
    )
    assert installer.install_hub_nodes(fake_venv, None, installer.hub_nodes()) == []
    assert [cmd[-1] for cmd in pip.commands] == ["dora-echo==0.5.0"]
    monkeypatch.setattr(installer, "unmet", lambda venv, reqs: [])
    pip.commands.clear()
    assert installer.install_hub_nodes(fake_venv, None, installer.hub_nodes()) == [] and pip.commands == []


def test_a_hub_node_that_cannot_be_had_offline_is_a_warning_retried_with_wheels(fake_venv, monkeypatch, capsys):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    pip = FakePip(fail={"dora-echo==0.5.0"})
    monkeypatch.setattr(installer, "run", pip)
    missing = installer.install_hub_nodes(fake_venv, "/wheels", installer.hub_nodes())  # never raises
    assert missing == ["dora-echo==0.5.0"]
    assert [cmd[-1] for cmd in pip.commands] == [
        text for text, _ in installer.hub_nodes()
    ]  # the others still installed
    assert all(
        "--no-index" in cmd and cmd[cmd.index("--find-links") + 1] == str(Path("/wheels").resolve())
        for cmd in pip.commands
    )
    assert (
        "hub node dora-echo==0.5.0: not to be had here (ERROR: Could not find a version that satisfies the requirement "
        "dora-echo==0.5.0 (from versions: none))"
    ) in capsys.readouterr().out
    # Recorded with the missing test requirements: retried by a make with WHEELS= or an index.
    stamp = {"mode": "fresh", "python": "/usr/bin/python3", "digest": "d", "missing": missing}
    (fake_venv / "bin").mkdir()
    (fake_venv / "bin" / "python").write_text("")
    assert installer.up_to_date(stamp, "d", "/usr/bin/python3", fake_venv, None)
    assert not installer.up_to_date(stamp, "d", "/usr/bin/python3", fake_venv, "wheels")


@pytest.mark.parametrize("mode", ["fresh", "layered"])
def test_both_ways_install_the_hub_nodes_after_the_project_and_record_what_is_missing(
    tmp_path, monkeypatch, capsys, mode
):
    venv = tmp_path / ".venv"
    venv.mkdir()
    steps = []

    def step(name, result=None):
        def record(*args, **kwargs):
            steps.append(name)
            return result

        return record

    monkeypatch.setattr(installer, "read_stamp", lambda venv: None)
    monkeypatch.setattr(installer, "which_outside", lambda python, venv: "/usr/bin/python3")
    monkeypatch.setattr(
        installer, "probe_interpreter", lambda python: probe(**(SUPPORTED if mode == "layered" else {}))
    )
    monkeypatch.setattr(installer, "must_rebuild", lambda *args: False)
    monkeypatch.setattr(installer, "install_fresh", step("project"))
    monkeypatch.setattr(installer, "install_layered", step("project", ["hypothesis>=6.100"]))
    monkeypatch.setattr(installer, "link_dora_cli", step("link dora"))
    optional = []
    monkeypatch.setattr(
        installer,
        "install_optional",
        lambda venv, wheels, reqs: (steps.append("optional"), optional.extend(reqs)) and reqs[:1],
    )
    monkeypatch.setattr(installer, "install_hub_nodes", step("hub nodes", ["dora-echo==0.5.0"]))
    monkeypatch.setattr(installer, "link_hub_scripts", step("link hub scripts"))
    monkeypatch.setattr(installer, "verify", step("verify", "summary"))
    assert installer.main(["--venv", str(venv)]) == 0
    if mode == "fresh":
        assert steps == ["project", "optional", "hub nodes", "verify"]
    else:
        assert steps == ["project", "link dora", "optional", "hub nodes", "link hub scripts", "verify"]
    assert optional == installer.optional_requirements(mode)
    out = capsys.readouterr().out
    assert (
        "install: warning: hub node dora-echo==0.5.0 is missing: its example's tests skip (a later make with WHEELS= "
        "retries)" in out
    )
    stamp = json.loads((venv / installer.STAMP).read_text())
    assert stamp["missing"] == (["hypothesis>=6.100"] if mode == "layered" else []) + ["dora-echo==0.5.0"]
    assert stamp["optional_missing"] == optional[:1]  # recorded apart: not a requirement of the project or its tests


def test_a_malformed_hub_list_fails_before_anything_is_installed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(installer, "read_stamp", lambda venv: None)
    monkeypatch.setattr(installer, "which_outside", lambda python, venv: "/usr/bin/python3")
    monkeypatch.setattr(installer, "probe_interpreter", lambda python: probe())
    malformed = tmp_path / "hub-nodes.txt"
    malformed.write_text("dora-echo==0.5.0\n\ndora-echo>=0.5\n")
    read = installer.hub_nodes
    monkeypatch.setattr(installer, "hub_nodes", lambda: read(malformed))
    monkeypatch.setattr(installer, "install_fresh", lambda *a: pytest.fail("installed with a malformed hub list"))
    assert installer.main(["--venv", str(tmp_path / ".venv")]) == 1
    assert "install: FAILED: hub-nodes.txt line 3" in capsys.readouterr().err


# ------------------------------------------------------- the JPEG engines' packages (torchcodec, nvimgcodec)
def test_torchcodec_is_a_runtime_dependency_pinned_for_the_fresh_install():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torchcodec>=0.16" in project["dependencies"]
    assert installer.constraint_pins()["torchcodec"] == "torchcodec==0.17.0"
    assert set(installer.FALLBACKS) == {"torchcodec"}


def test_the_nvimgcodec_extra_is_pinned_for_a_fresh_venv_and_at_its_floors_over_a_preinstalled_torch():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["nvimgcodec"]
    # nvidia-nvjpeg, as nvImageCodec's own `nvjpeg` extra names it (nvidia-nvjpeg-cu13 is an empty placeholder).
    assert extra == ["nvidia-nvimgcodec-cu13>=0.9", "nvidia-nvjpeg>=13"]
    assert installer.optional_requirements("fresh", "nvimgcodec") == [
        "nvidia-nvimgcodec-cu13==0.9.0.20",
        "nvidia-nvjpeg==13.3.2.43",
    ]
    assert installer.optional_requirements("layered", "nvimgcodec") == extra


def test_every_optional_extra_installs_best_effort_pinned_for_a_fresh_venv():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(installer.OPTIONAL_EXTRAS) == {"nvimgcodec", "rerun", "plots"} and set(installer.OPTIONAL_EXTRAS) <= set(
        extras
    )
    assert installer.optional_requirements("fresh", "rerun") == ["rerun-sdk==0.41.0"]
    assert installer.optional_requirements("layered", "plots") == ["matplotlib>=3.8"]
    assert installer.optional_requirements("fresh") == [
        "nvidia-nvimgcodec-cu13==0.9.0.20",
        "nvidia-nvjpeg==13.3.2.43",
        "rerun-sdk==0.41.0",
        "matplotlib==3.11.2",
    ]
    assert installer.optional_purpose("rerun-sdk>=0.41") == "the tc-rerun-sink node"
    assert installer.optional_purpose("matplotlib==3.11.2") == "make plots"


def test_constraint_pins_are_read_by_name(tmp_path):
    path = tmp_path / "constraints.txt"
    path.write_text("# a comment\ntorch==2.14.1  # why\n\nNVIDIA_nvjpeg==13.3.2.43\nnot-a-pin>=1\n")
    assert installer.constraint_pins(path) == {"torch": "torch==2.14.1", "nvidia-nvjpeg": "NVIDIA_nvjpeg==13.3.2.43"}
    assert installer.constraint_pins(tmp_path / "absent.txt") == {}


class FakeEnv:
    """installer.run and installer.unmet over a .venv that has `has` (requirement names): a pip
    install of names in `fail` fails as pip does offline; any other adds them."""

    def __init__(self, has=(), fail=()):
        self.has, self.fail = set(has), set(fail)
        self.commands: list[list[str]] = []

    def run(self, cmd, *, capture=False, check=True):
        cmd = [str(c) for c in cmd]
        self.commands.append(cmd)
        wanted = [
            c
            for c in cmd[cmd.index("install") + 1 :]
            if not c.startswith("-") and cmd[cmd.index(c) - 1] not in ("-c", "--find-links")
        ]
        failed = [w for w in wanted if installer.requirement_name(w) in self.fail]
        if failed:
            stderr = (
                f"ERROR: Could not find a version that satisfies the requirement {failed[0]} (from versions: none)\n"
                f"ERROR: No matching distribution found for {failed[0]}\n"
            )
            return subprocess.CompletedProcess(cmd, 1, "", stderr)
        self.has |= {installer.requirement_name(w) for w in wanted}
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def unmet(self, venv, reqs):
        return [(text, group, None) for text, group in reqs if installer.requirement_name(text) not in self.has]


LAYERED_PIP = [
    "/venv/bin/python",
    "-m",
    "pip",
    "install",
    "--quiet",
    "--no-input",
    "--no-index",
    "-c",
    "/venv/pins.txt",
]


def test_over_a_preinstalled_torch_a_torchcodec_not_to_be_had_is_a_warning_not_an_error(monkeypatch, capsys):
    env = FakeEnv(has={"torch", "torchvision", "pyarrow", "numpy", "pytest"}, fail={"torchcodec"})
    monkeypatch.setattr(installer, "run", env.run)
    monkeypatch.setattr(installer, "unmet", env.unmet)
    missing = installer.install_missing(Path("/venv"), LAYERED_PIP, installer.requirements())  # does not raise
    assert "torchcodec>=0.16" in missing and "dora-rs>=1.1,<1.2" not in missing  # the rest installed, one by one
    assert {"dora-rs", "dora-rs-cli", "pyyaml", "hypothesis"} <= env.has
    out = capsys.readouterr().out
    assert (
        "install: torchcodec>=0.16: not to be had here: the JPEG nodes use torchvision's codecs (ENGINE=auto falls "
        "back); bash ../shared/gpu/wheels.sh torchcodec==0.17.0 carries it\n"
    ) in out


def test_over_a_preinstalled_torch_a_runtime_requirement_without_a_fallback_is_still_an_error(monkeypatch, capsys):
    env = FakeEnv(has={"torch", "torchvision", "pyarrow", "numpy"}, fail={"dora-rs", "torchcodec"})
    monkeypatch.setattr(installer, "run", env.run)
    monkeypatch.setattr(installer, "unmet", env.unmet)
    with pytest.raises(
        installer.InstallError, match=r"missing: dora-rs>=1.1,<1.2 \(found none\)\. Put the wheels"
    ) as raised:
        installer.install_missing(Path("/venv"), LAYERED_PIP, installer.requirements())
    assert "torchcodec" not in str(raised.value)


def test_a_missing_torchcodec_is_warned_about_recorded_and_retried_with_wheels(tmp_path, monkeypatch, capsys):
    venv = tmp_path / ".venv"
    venv.mkdir()
    monkeypatch.setattr(installer, "read_stamp", lambda venv: None)
    monkeypatch.setattr(installer, "which_outside", lambda python, venv: "/usr/bin/python3")
    monkeypatch.setattr(installer, "probe_interpreter", lambda python: probe(**SUPPORTED))
    monkeypatch.setattr(installer, "must_rebuild", lambda *args: False)
    monkeypatch.setattr(installer, "install_layered", lambda probe, venv, wheels: ["torchcodec>=0.16"])
    for name in ("link_dora_cli", "link_hub_scripts"):
        monkeypatch.setattr(installer, name, lambda *args: None)
    monkeypatch.setattr(installer, "install_optional", lambda *args: [])
    monkeypatch.setattr(installer, "install_hub_nodes", lambda *args: [])
    monkeypatch.setattr(installer, "verify", lambda venv: "summary")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert installer.main(["--venv", str(venv)]) == 0
    out = capsys.readouterr().out
    assert (
        "install: warning: torchcodec>=0.16 is missing: the JPEG nodes use torchvision's codecs (ENGINE=auto falls "
        "back) (a later make with WHEELS= retries)"
    ) in out
    assert "test requirement torchcodec" not in out
    stamp = json.loads((venv / installer.STAMP).read_text())
    assert stamp["missing"] == ["torchcodec>=0.16"]
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    assert installer.up_to_date(stamp, stamp["digest"], "/opt/torch/.venv/bin/python3", venv, None)
    assert not installer.up_to_date(stamp, stamp["digest"], "/opt/torch/.venv/bin/python3", venv, "wheels")


def test_the_optional_engine_packages_install_each_alone_held_to_what_the_venv_has(fake_venv, monkeypatch, capsys):
    pip = FakePip()
    monkeypatch.setattr(installer, "run", pip)
    reqs = installer.optional_requirements("fresh", "nvimgcodec")
    assert installer.install_optional(fake_venv, None, reqs) == []
    pins = fake_venv / installer.HUB_PINS
    assert [cmd[-1] for cmd in pip.commands] == reqs
    for cmd in pip.commands:
        assert (
            cmd[1:4] == ["-m", "pip", "install"] and cmd[cmd.index("-c") + 1] == str(pins) and "--no-deps" not in cmd
        ), cmd
    assert "torch==2.14.1" in pins.read_text()
    assert capsys.readouterr().out.splitlines() == [
        "install: optional nvidia-nvimgcodec-cu13==0.9.0.20 (the JPEG nodes' nvImageCodec engine): installed",
        "install: optional nvidia-nvjpeg==13.3.2.43 (the JPEG nodes' nvImageCodec engine): installed",
    ]
    # Already there (in .venv or the environment below it): nothing is run.
    monkeypatch.setattr(installer, "unmet", lambda venv, reqs: [])
    pip.commands.clear()
    assert installer.install_optional(fake_venv, None, reqs) == [] and pip.commands == []


def test_an_optional_engine_package_not_to_be_had_is_one_line_never_an_error(fake_venv, monkeypatch, capsys):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    reqs = installer.optional_requirements("layered", "nvimgcodec")
    pip = FakePip(fail={reqs[0]})
    monkeypatch.setattr(installer, "run", pip)
    assert installer.install_optional(fake_venv, "/wheels", reqs) == [reqs[0]]  # never raises
    assert [cmd[-1] for cmd in pip.commands] == reqs  # the other still installed
    assert all(
        "--no-index" in cmd and cmd[cmd.index("--find-links") + 1] == str(Path("/wheels").resolve())
        for cmd in pip.commands
    )
    assert capsys.readouterr().out.splitlines() == [
        "install: optional nvidia-nvimgcodec-cu13>=0.9 (the JPEG nodes' nvImageCodec engine): not to be had here "
        "(ERROR: Could not find a version that satisfies the requirement nvidia-nvimgcodec-cu13>=0.9 (from versions: "
        "none))",
        "install: optional nvidia-nvjpeg>=13 (the JPEG nodes' nvImageCodec engine): installed",
    ]
    # Retried, as the rest, only where it could be had now: a wheel folder named, or an index.
    stamp = {
        "mode": "layered",
        "python": "/opt/x/bin/python",
        "digest": "d",
        "missing": [],
        "optional_missing": [reqs[0]],
    }
    (fake_venv / "bin").mkdir()
    (fake_venv / "bin" / "python").write_text("")
    assert installer.up_to_date(stamp, "d", "/opt/x/bin/python", fake_venv, None)
    assert not installer.up_to_date(stamp, "d", "/opt/x/bin/python", fake_venv, "wheels")
    monkeypatch.delenv("PIP_NO_INDEX")
    assert not installer.up_to_date(stamp, "d", "/opt/x/bin/python", fake_venv, None)


@pytest.mark.parametrize(
    "name, old, new",
    [
        ("pyproject.toml", '"nvidia-nvjpeg>=13"', '"nvidia-nvjpeg>=13.1"'),
        ("constraints.txt", "nvidia-nvimgcodec-cu13==0.9.0.20", "nvidia-nvimgcodec-cu13==0.9.1.0"),
        ("constraints.txt", "torchcodec==0.17.0", "torchcodec==0.17.1"),
    ],
)
def test_an_edit_of_the_engine_packages_installs_again(tmp_path, monkeypatch, name, old, new):
    for each in ("pyproject.toml", "constraints.txt", installer.HUB_NODES, "tools/install_env.py"):
        (tmp_path / each).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / each, tmp_path / each)
    monkeypatch.setattr(installer, "ROOT", tmp_path)
    before, wanted = installer.inputs_digest(), installer.optional_requirements("fresh", "nvimgcodec")
    text = (tmp_path / name).read_text()
    assert old in text
    (tmp_path / name).write_text(text.replace(old, new))
    assert installer.inputs_digest() != before
    if name == "constraints.txt" and "nvimgcodec" in old:
        assert installer.optional_requirements("fresh", "nvimgcodec") == [
            new,
            wanted[1],
        ]  # a new pin is unmet: installed again


# ------------------------------------------------------------------------- interrupted downloads
@pytest.mark.parametrize(
    "offline, failures, calls, ok", [(False, 2, 3, True), (False, 3, 3, False), (True, 1, 1, False)]
)
def test_a_download_cut_off_is_tried_again_online_and_never_offline(monkeypatch, offline, failures, calls, ok):
    monkeypatch.setenv("PIP_NO_INDEX", "1" if offline else "0")
    monkeypatch.setattr(installer.time, "sleep", lambda s: None)
    monkeypatch.setattr(
        installer.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100 << 30, 1 << 30, 99 << 30)
    )
    seen = []

    def fake_run(cmd, *, capture=False, check=True):
        seen.append(cmd)
        code = 1 if len(seen) <= failures else 0
        if check and code:
            raise installer.InstallError(f"`{cmd}` exited with {code}")
        return subprocess.CompletedProcess(cmd, code)

    monkeypatch.setattr(installer, "run", fake_run)
    if ok:
        assert installer.run_downloading(["pip", "install", "torch"]).returncode == 0
    else:
        with pytest.raises(installer.InstallError, match="exited with 1"):
            installer.run_downloading(["pip", "install", "torch"])
    assert len(seen) == calls


def test_the_reason_an_optional_package_was_not_had_is_pips_error_not_its_warnings():
    """A fresh install said rerun-sdk was "not to be had here (WARNING: Location ... is ignored)":
    pip's warnings about skipped find-links come first, its reason last."""
    stderr = (
        "WARNING: Location 'file:///opt/pypi/simple/rerun-sdk/' is ignored: it is neither a file nor a directory.\n"
        "  WARNING: Connection interrupted while downloading.\n"
        "error: incomplete-download\n"
        "\n× Download failed after 6 attempts because not enough bytes were received (88.3 MB/170.6 MB)\n"
    )
    proc = subprocess.CompletedProcess([], 1, "", stderr)
    assert installer.first_error(proc) == "error: incomplete-download"
    only_warnings = subprocess.CompletedProcess([], 1, "", "WARNING: skipped\nno matching distribution\n")
    assert installer.first_error(only_warnings) == "no matching distribution"


def test_an_optional_package_whose_download_was_cut_off_is_tried_once_more(fake_venv, monkeypatch, capsys):
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    monkeypatch.setattr(installer.time, "sleep", lambda s: None)
    monkeypatch.setattr(installer, "unmet", lambda venv, reqs: [(text, kind, None) for text, kind in reqs])
    monkeypatch.setattr(installer, "write_hub_pins", lambda venv: "pins.txt")
    calls = []

    def fake_run(cmd, *, capture=False, check=True):
        calls.append(cmd[-1])
        if cmd[-1] == "rerun-sdk==0.41.0" and calls.count(cmd[-1]) == 1:
            return subprocess.CompletedProcess(cmd, 1, "", "error: incomplete-download\n")
        if cmd[-1] == "never==1":
            return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for never==1\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(installer, "run", fake_run)
    missing = installer.install_optional(fake_venv, None, ["rerun-sdk==0.41.0", "never==1"])
    assert missing == ["never==1"] and calls == ["rerun-sdk==0.41.0", "rerun-sdk==0.41.0", "never==1"]
    assert "No matching distribution" in capsys.readouterr().out


def test_a_fresh_environment_is_refused_before_any_download_on_a_disk_without_room(tmp_path, monkeypatch):
    """A CI run filled the disk with its second torch: pip said "Connection interrupted ...
    incomplete-download" three times over. Refused up front now, naming the disk."""
    monkeypatch.setattr(
        installer.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100 << 30, 99 << 30, 2 << 30)
    )
    monkeypatch.setattr(installer, "run", lambda *a, **k: pytest.fail("nothing may run"))
    with pytest.raises(installer.InstallError, match=r"takes about 6 GB, and the disk holding it has 2.0 GB free"):
        installer.install_fresh("python3", tmp_path / ".venv-floor", None)


def test_a_failed_download_on_a_full_disk_is_not_tried_again(monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    monkeypatch.setattr(
        installer.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100 << 30, 100 << 30, 150 << 20)
    )
    calls = []
    monkeypatch.setattr(installer, "run", lambda cmd, **k: calls.append(cmd) or subprocess.CompletedProcess(cmd, 1))
    with pytest.raises(installer.InstallError, match="has 150 MB free"):
        installer.run_downloading(["pip", "install", "torch"])
    assert len(calls) == 1


def test_what_pip_says_about_the_machines_own_index_config_is_counted_not_shown(capsys, tmp_path):
    """A fresh `make run` printed 49 pip WARNING lines about indexes this machine's pip.conf names
    (`file:///opt/pypi/simple` without a page for a package) and setuptools' 11-line "Editable
    installation." advice: neither is about the install; a real warning still shows."""
    ignored = "is ignored: it is neither a file nor a directory."
    script = (
        "import sys, warnings\n"
        f"print(\"WARNING: Location 'file:///opt/pypi/simple/torch/' {ignored}\")\n"
        f"print(\"WARNING: Location 'file:///opt/pypi/simple/dora-rs/' {ignored}\")\n"
        "print('WARNING: a real one', file=sys.stderr)\n"
        "warnings.warn('Editable installation.\\n!!\\n  Please be careful with folders')\n"
        "warnings.warn('something else')\n"
    )
    noisy = tmp_path / "noisy.py"
    noisy.write_text(script)
    proc = installer.run([installer.sys.executable, noisy])
    out = capsys.readouterr().out
    assert proc.returncode == 0
    assert "is ignored: it is neither" not in out and "Editable installation" not in out
    assert "WARNING: a real one" in out and "something else" in out
    assert "install: (2 pip warnings not shown: this machine's pip configuration names package indexes " in out
    assert "(file:///opt/pypi/simple)" in out
