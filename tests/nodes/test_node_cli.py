"""Nodes that explain themselves: `--help` without a daemon, a clear line when started outside
dora, `--version`, a refusal to start on an env name close to a setting or an input the node does
not read, warnings about what only looks wrong, readable manifests. (In a real dataflow:
tests/e2e/test_node_cli_e2e.py.)"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tensor_codec.dora import Link
from tensor_codec_nodes.common.manifest import manifests
from tensor_codec_nodes.common.registry import node_packages
from tensor_codec_nodes.common.startup import close_setting_names, help_text, preflight, wiring_problems
from tests.support.dora import ROOT, node_script
from tests.support.fakes import FakeNode

NODE_PACKAGES = node_packages()
SPECS = {package: importlib.import_module(f"tensor_codec_nodes.{package}.config").SPEC for package in NODE_PACKAGES}
ENCODER, CAMERA, RECEIVER, SENDER = (
    SPECS[p] for p in ("jpeg_encoder", "camera_source", "tensor_receiver", "tensor_sender")
)


def no_dora_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("DORA_")}


def outside_dora(script: str, *args: str) -> subprocess.CompletedProcess:
    """A node's console script run as a user would from a shell: no dora daemon around."""
    return subprocess.run([node_script(script), *args], env=no_dora_env(), capture_output=True, text=True, timeout=60)


@pytest.mark.slow  # a fresh interpreter
def test_a_scripts_entry_point_imports_neither_torch_nor_dora():
    """--help answers in a fraction of a second: main.py reads the node's SPEC only, the node
    itself (node.py: torch, dora, tensor_codec) is imported once --help is not asked for."""
    import sys

    code = (
        "import sys\n"
        f"for package in {list(NODE_PACKAGES)!r}:\n"
        "    __import__(f'tensor_codec_nodes.{package}.main')\n"
        "print(sorted(m for m in ('torch', 'torchvision', 'dora', 'tensor_codec') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "[]", proc.stdout


@pytest.mark.slow  # a fresh interpreter
def test_importing_the_nodes_package_leaves_the_environment_alone():
    """A library import must not change its importer's process: importing the package, its common
    modules and every node's entry point, spec and settings leaves os.environ as it was (it used
    to set OMP_WAIT_POLICY)."""
    import sys

    code = (
        "import os\n"
        "before = dict(os.environ)\n"
        "import tensor_codec_nodes, tensor_codec_nodes.common.loop, tensor_codec_nodes.common.startup\n"
        f"for package in {list(NODE_PACKAGES)!r}:\n"
        "    for module in ('main', 'config'):\n"
        "        __import__(f'tensor_codec_nodes.{package}.{module}')\n"
        "after = dict(os.environ)\n"
        "print(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"changed on import: {proc.stdout}"


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize("given, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_a_node_start_sets_omp_wait_policy_before_the_node_and_torch_load(tmp_path, given, expected):
    """OpenMP reads OMP_WAIT_POLICY once, when torch loads: a node's console script sets the
    passive default (bench/README.md: spinning workers of one node steal the others' cores) before
    it imports the node; a value the dataflow gives wins. The stand-in node records what its
    import saw."""
    import sys

    package = tmp_path / "standin_node"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "node.py").write_text(
        "import os, sys\n"
        "SEEN = (os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)\n"
        "def main():\n"
        "    print(SEEN)\n"
        "    return 0\n"
    )
    code = (
        "import sys\n"
        "from tensor_codec_nodes.common.loop import console_main\n"
        "from tensor_codec_nodes.tensor_sender.config import SPEC\n"
        "sys.argv = ['tc-tensor-sender']\n"
        "sys.exit(console_main(SPEC, 'standin_node'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr((expected, False)), proc.stdout


def answered(package: str, flag: str):
    """Runs a node's script with `flag` outside dora; -> (its spec, the finished process), which
    must have exited 0."""
    spec = SPECS[package]
    proc = outside_dora(spec.name, flag)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return spec, proc


@pytest.mark.slow  # a fresh interpreter per node
@pytest.mark.parametrize("package", NODE_PACKAGES)
def test_every_script_answers_help_without_a_daemon(package):
    spec, proc = answered(package, "--help")
    assert "DORA_NODE_CONFIG" not in proc.stdout + proc.stderr and "panicked" not in proc.stderr
    text = proc.stdout
    assert text.startswith(f"{spec.name}: a dora node")
    for port in spec.inputs + spec.outputs:
        assert f"\n  {port.id}" in text, port.id
    for setting in spec.settings:  # every setting with its default, from the manifest's own table
        shown = repr(setting.default) if setting.default == "" else setting.default
        assert f"\n  {setting.name} = {shown}    (" in text, setting.name
    assert text == help_text(spec) + "\n"


@pytest.mark.slow  # two fresh interpreters
def test_outside_dora_a_node_says_how_to_start_it_instead_of_a_backtrace():
    proc = outside_dora("tc-jpeg-encoder")
    assert proc.returncode == 2
    assert "tc-jpeg-encoder is a dora node: start it from a dataflow" in proc.stderr
    assert "--help" in proc.stderr and "panicked" not in proc.stderr and "backtrace" not in proc.stderr.lower()
    bad = outside_dora("tc-jpeg-encoder", "--qualty=3")
    assert (
        bad.returncode == 2
        and "unexpected argument '--qualty=3'" in bad.stderr
        and "environment variables" in bad.stderr
    )


def test_env_names_close_to_a_setting_are_named_with_the_setting():
    names = [
        "WIDHT",
        "HEIGTH",
        "WIDTH",
        "PATH",
        "HOME",
        "COLUMNS",
        "LINES",
        "TERM",
        "TC_MAX_LEAVES",
        "DORA_NODE_CONFIG",
        "fps",
    ]
    assert close_setting_names(CAMERA, names) == [("HEIGTH", "HEIGHT"), ("WIDHT", "WIDTH")]
    for spec in SPECS.values():
        assert close_setting_names(spec, os.environ) == [], "this machine's own environment must not look like a typo"


def test_an_env_name_close_to_a_setting_refuses_to_start_naming_both_and_how_to_list_settings():
    """FRAMEZ=10 only warned, and the camera then ran forever (FRAMES kept its default, 0)."""
    from tensor_codec_nodes.common import startup

    problems = startup.env_problems(CAMERA, ["FRAMEZ", "WIDTH", "DEVICE"], from_dataflow=True)
    assert problems.errors == [
        "env FRAMEZ is not a setting of tc-camera-source: did you mean FRAMES? (`tc-camera-source --help` lists "
        "its settings)"
    ]
    assert problems.warnings == []
    # a setting's name in the wrong case is the setting misspelt too (env names are case-sensitive)
    assert startup.env_problems(CAMERA, ["frames"], from_dataflow=True).errors == [
        "env frames is not a setting of tc-camera-source: did you mean FRAMES? (`tc-camera-source --help` lists "
        "its settings)"
    ]


def test_env_names_for_libraries_are_never_refused_and_unknown_ones_only_warned():
    from tensor_codec_nodes.common import startup

    libraries = [
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "KMP_AFFINITY",
        "OPENBLAS_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "NCCL_DEBUG",
        "TORCH_HOME",
        "PYTORCH_CUDA_ALLOC_CONF",
        "HF_HOME",
        "LD_LIBRARY_PATH",
        "LANG",
        "LC_ALL",
        "PYTHONPATH",
        "RUST_LOG",
        "TC_TRANSPORT",
        "TC_FRAMES",
        "DORA_FRAMES",
        "PATH",
    ]
    for spec in SPECS.values():
        assert startup.env_problems(spec, libraries, from_dataflow=True) == ([], []), spec.name
    unknown = startup.env_problems(CAMERA, ["SOMETHING_ELSE"], from_dataflow=True)
    assert unknown.errors == []
    assert unknown.warnings == [
        "env SOMETHING_ELSE is not a setting of tc-camera-source: the node ignores it (a library may read it; "
        "`tc-camera-source --help` lists its settings)"
    ]
    # the process's own environment (dora did not say which names the dataflow gave): only typos
    assert startup.env_problems(CAMERA, ["SOMETHING_ELSE", "FRAMEZ"], from_dataflow=False) == (
        [
            "env FRAMEZ is not a setting of tc-camera-source: did you mean FRAMES? (`tc-camera-source --help` "
            "lists its settings)"
        ],
        [],
    )


def test_an_input_wired_under_an_unknown_id_or_a_required_one_missing_refuses_to_start():
    """The encoder wired as `image:` finished with 0 frames and exit status 0: now it does not start."""
    problems = wiring_problems(ENCODER, inputs=["image"], outputs=["jpeg"])
    assert problems.errors == [
        "input `image` is not one this node reads (`frames`, `ack*`): its messages would be ignored; did you mean "
        "`frames`?",
        "input `frames` is not wired: this node would get nothing to work on (wire it as `frames: <node>/<output>`)",
    ]
    assert problems.warnings == []
    assert wiring_problems(ENCODER, inputs=["frames", "ack_decoder"], outputs=["jpeg", "ack"]) == ([], [])


def test_outputs_that_the_node_does_not_send_or_none_at_all_are_warnings():
    assert wiring_problems(CAMERA, inputs=[], outputs=["frames"]) == (
        [],
        ["output `frames` is not one this node sends (`image`)"],
    )
    assert wiring_problems(CAMERA, inputs=[], outputs=[]) == (
        [],
        ["declares no outputs: dora drops what this node sends (add `outputs: [image]`)"],
    )
    assert wiring_problems(RECEIVER, inputs=["anything", "at_all"], outputs=[]) == ([], [])  # any input id
    assert wiring_problems(SENDER, inputs=["ack_local"], outputs=["local", "remote"]) == ([], [])  # every output


def test_preflight_reads_this_nodes_env_and_wiring_and_logs_errors_and_warnings(caplog):
    env = {"QUALTY": "50", "BATCH": "2", "TC_MAX_LEAVES": "9", "OMP_NUM_THREADS": "1"}
    node = FakeNode(
        node_id="enc",
        inputs=["image"],
        outputs=["jpeg", "jpegs"],
        descriptor={"nodes": [{"id": "other", "env": {"QUALTY": "1"}}, {"id": "enc", "env": env}]},
    )
    with caplog.at_level(logging.WARNING):
        problems = preflight(Link.of(node), ENCODER, logging.getLogger("t"))
    assert problems.errors[0] == (
        "env QUALTY is not a setting of tc-jpeg-encoder: did you mean QUALITY? (`tc-jpeg-encoder --help` lists its "
        "settings)"
    )
    assert len(problems.errors) == 3  # QUALTY, input `image`, `frames` not wired
    assert problems.warnings == ["output `jpegs` is not one this node sends (`jpeg`, `ack`)"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert errors[:3] == problems.errors and warnings == problems.warnings
    assert "not starting" in errors[-1] and "exit status 2" in errors[-1]


DORA_CONFIG = """\
dataflow_id: 01a21ac5-d75f-7a2f-aad5-67711380878b
node_id: camera
run_config:
  inputs:
    tick: dora/timer/millis/20
  outputs:
  - image
daemon_communication: !Tcp
  socket_addr: 127.0.0.1:46687
dataflow_descriptor:
  nodes:
  - id: camera
    path: tc-camera-source
    env:
      FRAMEZ: 10
      OMP_NUM_THREADS: 1
    outputs:
    - image
    inputs:
      tick: dora/timer/millis/20
  - id: receiver
    path: tc-tensor-receiver
    env:
      FRAMEZ: 10
    inputs:
      frames: camera/image
dynamic: false
"""


def test_a_node_refuses_before_it_joins_the_dataflow(monkeypatch, caplog):
    """What the daemon hands the process (DORA_NODE_CONFIG) is checked before `Node()`: a node that
    refuses never joins, so dora does not start the dataflow (its other nodes fail to join)."""
    import dora

    from tensor_codec_nodes.camera_source.node import CameraSource
    from tensor_codec_nodes.common.loop import EXIT_BAD_CONFIG, run

    def joined():
        raise AssertionError("the node joined the dataflow")

    monkeypatch.setattr(dora, "Node", joined)
    monkeypatch.setenv("DORA_NODE_CONFIG", DORA_CONFIG)
    for name in ("FRAMES", "FRAMEZ", "WIDTH", "HEIGHT", "SOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEVICE", "cpu")
    with caplog.at_level(logging.WARNING):
        assert run(CameraSource) == EXIT_BAD_CONFIG
    assert "env FRAMEZ is not a setting of tc-camera-source: did you mean FRAMES?" in caplog.text
    assert "OMP_NUM_THREADS" not in caplog.text


def test_a_node_joined_without_the_daemons_config_is_checked_through_its_one_link(monkeypatch, caplog):
    """Without DORA_NODE_CONFIG the checks run once joined, on the node's Link; that link is the
    one the node's code finds (`Link.of`, what tc.send uses too), and a refused node's is let go."""
    import dora

    from tensor_codec.dora import Link
    from tensor_codec_nodes.common import runtime, startup

    monkeypatch.delenv("DORA_NODE_CONFIG", raising=False)
    monkeypatch.setenv("DORA_TEST_WITH_INPUTS", "inputs.json")  # started by dora's test harness
    monkeypatch.setattr(runtime, "settle_heap", lambda: None)  # no gc.freeze() in the test process
    descriptor = {"nodes": [{"id": "enc", "env": {"QUALITY": "50"}}]}
    node = FakeNode(node_id="enc", inputs=["frames"], outputs=["jpeg"], descriptor=descriptor)
    monkeypatch.setattr(dora, "Node", lambda: node)
    link = startup.join_dataflow(ENCODER, logging.getLogger("t"))
    assert link is not None and link.node is node and Link.of(node) is link

    miswired = FakeNode(node_id="enc", inputs=["image"], outputs=["jpeg"], descriptor=descriptor)
    monkeypatch.setattr(dora, "Node", lambda: miswired)
    closed, close = [], Link.close
    monkeypatch.setattr(Link, "close", lambda self: closed.append(self.node) or close(self))
    with caplog.at_level(logging.ERROR):
        assert startup.join_dataflow(ENCODER, logging.getLogger("t")) is None
    assert "input `image` is not one this node reads" in caplog.text and closed == [miswired]


def test_a_miswired_input_in_the_daemons_config_is_refused_before_joining(caplog):
    from tensor_codec_nodes.common import startup

    config = DORA_CONFIG.replace("node_id: camera", "node_id: receiver")
    assert startup.dora_node_config({"DORA_NODE_CONFIG": config})["node_id"] == "receiver"
    sink = SPECS["jpeg_sink"]
    config = {
        "node_id": "sink",
        "run_config": {"inputs": {"jpg": "encoder/jpeg"}, "outputs": []},
        "dataflow_descriptor": {"nodes": [{"id": "sink", "env": {"DIR": "out"}}]},
    }
    with caplog.at_level(logging.WARNING):
        problems = startup.preflight(config, sink, logging.getLogger("t"))
    assert problems.errors == [
        "input `jpg` is not one this node reads (`jpeg`): its messages would be ignored; did you mean `jpeg`?",
        "input `jpeg` is not wired: this node would get nothing to work on (wire it as `jpeg: <node>/<output>`)",
    ]
    assert startup.dora_node_config({}) is None and startup.dora_node_config({"DORA_NODE_CONFIG": ":"}) is None


@pytest.mark.parametrize(
    "flow", ["dataflow.yml", "dataflow-cluster.yml", *sorted(p.name for p in (ROOT / "examples").glob("*.yml"))]
)
def test_every_shipped_dataflow_passes_every_nodes_preflight(flow):
    """A dataflow the project ships must not make one of its nodes refuse to start."""
    from tensor_codec_nodes.common import startup

    path = ROOT / flow if (ROOT / flow).exists() else ROOT / "examples" / flow
    descriptor = yaml.safe_load(path.read_text())
    by_script = {spec.name: spec for spec in SPECS.values()}
    checked = 0
    for entry in descriptor["nodes"]:
        spec = by_script.get(Path(str(entry.get("path", ""))).name)
        if spec is None:
            continue
        config = {
            "node_id": entry["id"],
            "run_config": {"inputs": entry.get("inputs") or {}, "outputs": entry.get("outputs") or []},
            "dataflow_descriptor": descriptor,
        }
        problems = startup.preflight(config, spec, logging.getLogger("t"))
        assert problems.errors == [], (flow, entry["id"])
        checked += 1
    assert checked, flow


def test_version_names_the_node_the_project_and_its_libraries_without_importing_torch(capsys):
    import sys

    from tensor_codec_nodes.common.startup import answer_command_line

    for flag in ("--version", "-V"):
        assert answer_command_line(CAMERA, [flag]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("tc-camera-source: dora-tensor-codec "), lines
        names = [line.split()[0] for line in lines[1:]]
        assert names == ["dora-rs", "torch", "torchvision", "pyarrow"], lines
        assert all(len(line.split()) >= 2 for line in lines), lines
    code = (
        "import sys\n"
        "from tensor_codec_nodes.common.startup import answer_command_line\n"
        "from tensor_codec_nodes.camera_source.config import SPEC\n"
        "assert answer_command_line(SPEC, ['--version']) == 0\n"
        "print(sorted(m for m in ('torch', 'torchvision', 'dora', 'tensor_codec') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout


def test_version_says_not_installed_for_what_is_absent(monkeypatch, capsys):
    import importlib.metadata

    from tensor_codec_nodes.common.startup import answer_command_line

    real = importlib.metadata.version

    def version(name):
        if name == "torchvision":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert answer_command_line(SENDER, ["--version"]) == 0
    assert "torchvision not installed" in capsys.readouterr().out.splitlines()


@pytest.mark.slow  # a fresh interpreter per node
@pytest.mark.parametrize("package", NODE_PACKAGES)
def test_every_script_answers_version_without_a_daemon(package):
    spec, proc = answered(package, "--version")
    assert proc.stdout.startswith(f"{spec.name}: dora-tensor-codec "), proc.stdout
    assert "\ndora-rs " in proc.stdout and "\ntorch " in proc.stdout, proc.stdout


def test_manifests_are_readable_yaml_with_required_and_a_parsable_example():
    for path, text in manifests().items():
        document = yaml.safe_load(text)
        assert path.read_text() == text, f"{path} is out of date"
        assert "\\n" not in text.split("\nexample:")[1], f"{path}: the example is one escaped string"
        example = yaml.safe_load(document["example"])
        assert document["name"] in [n.get("path") for n in example["nodes"]], path
        for section in ("inputs", "outputs", "env"):
            for name, entry in document[section].items():
                assert isinstance(entry["required"], bool), (path, section, name)
        assert "pip install dora-tensor-codec" not in text  # no index serves that name
