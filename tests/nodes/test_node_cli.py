"""Nodes that explain themselves: `--help` without a daemon, a clear line when started outside
dora, warnings about env names and wiring that look wrong, readable manifests. (The warnings in a
real dataflow: tests/e2e/test_node_cli_e2e.py.)"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess

import pytest
import yaml

from tensor_codec_nodes.common.manifest import NODE_PACKAGES, manifests
from tensor_codec_nodes.common.startup import close_setting_names, help_text, preflight, wiring_problems
from tests.support.dora import node_script
from tests.support.fakes import FakeNode

SPECS = {package: importlib.import_module(f"tensor_codec_nodes.{package}.spec").SPEC for package in NODE_PACKAGES}
ENCODER, CAMERA, RECEIVER, SENDER = (
    SPECS[p] for p in ("jpeg_encoder", "camera_source", "tensor_receiver", "tensor_sender")
)


def no_dora_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("DORA_")}


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


@pytest.mark.slow  # a fresh interpreter per node
@pytest.mark.parametrize("package", NODE_PACKAGES)
def test_every_script_answers_help_without_a_daemon(package):
    spec = SPECS[package]
    proc = subprocess.run(
        [node_script(spec.name), "--help"], env=no_dora_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
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
    proc = subprocess.run(
        [node_script("tc-jpeg-encoder")], env=no_dora_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "tc-jpeg-encoder is a dora node: start it from a dataflow" in proc.stderr
    assert "--help" in proc.stderr and "panicked" not in proc.stderr and "backtrace" not in proc.stderr.lower()
    bad = subprocess.run(
        [node_script("tc-jpeg-encoder"), "--qualty=3"], env=no_dora_env(), capture_output=True, text=True, timeout=60
    )
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
    assert close_setting_names(CAMERA, os.environ) == [], "this machine's own environment must not look like a typo"


def test_an_input_wired_under_an_unknown_id_is_named_with_the_right_one():
    problems = wiring_problems(ENCODER, inputs=["image"], outputs=["jpeg"])
    assert problems == [
        "input `image` is not one this node reads (`frames`, `ack*`): its messages are ignored; did you mean `frames`?",
        "input `frames` is not wired: this node gets nothing to work on (wire it as `frames: <node>/<output>`)",
    ]
    assert wiring_problems(ENCODER, inputs=["frames", "ack_decoder"], outputs=["jpeg", "ack"]) == []


def test_outputs_that_the_node_does_not_send_or_none_at_all():
    assert wiring_problems(CAMERA, inputs=[], outputs=["frames"]) == [
        "output `frames` is not one this node sends (`image`)"
    ]
    assert wiring_problems(CAMERA, inputs=[], outputs=[]) == [
        "declares no outputs: dora drops what this node sends (add `outputs: [image]`)"
    ]
    assert wiring_problems(RECEIVER, inputs=["anything", "at_all"], outputs=[]) == []  # any input id; ack optional
    assert (
        wiring_problems(SENDER, inputs=["ack_local"], outputs=["local", "remote"]) == []
    )  # every output gets the messages


def test_preflight_reads_this_nodes_env_and_wiring_and_logs_each_warning(caplog):
    env = {"QUALTY": "50", "BATCH": "2", "TC_MAX_LEAVES": "9"}
    node = FakeNode(
        node_id="enc",
        inputs=["image"],
        outputs=["jpeg"],
        descriptor={"nodes": [{"id": "other", "env": {"QUALTY": "1"}}, {"id": "enc", "env": env}]},
    )
    with caplog.at_level(logging.WARNING):
        warnings = preflight(node, ENCODER, logging.getLogger("t"))
    assert warnings[0] == (
        "env QUALTY is not a setting of tc-jpeg-encoder: did you mean QUALITY? (QUALITY keeps its default or its "
        "own value)"
    )
    assert len(warnings) == 3 and [r.getMessage() for r in caplog.records] == warnings


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
