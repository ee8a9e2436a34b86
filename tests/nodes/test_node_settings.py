"""Node settings: parsing, clear errors, device choice, and manifests generated from the same tables."""

from __future__ import annotations

import importlib
import re
import tomllib

import pytest
import torch
import yaml

from tensor_codec_nodes.common import manifest
from tensor_codec_nodes.common.delivery import DELIVERY_DOC, DELIVERY_SETTINGS, window_of
from tensor_codec_nodes.common.device import resolve_device
from tensor_codec_nodes.common.registry import node_packages, node_scripts, scripts_of
from tensor_codec_nodes.common.settings import Setting, SettingError, load_settings, parse_size, parse_sizes
from tests.support.paths import ROOT

CONFIGS = {name: importlib.import_module(f"tensor_codec_nodes.{name}.config") for name in node_packages()}


@pytest.mark.parametrize(
    "setting, raw, expected",
    [
        (Setting("N", "int", "1", "", minimum=0), " 42 ", 42),
        (Setting("X", "float", "1", "", minimum=0), "2.5", 2.5),
        (Setting("B", "bool", "0", ""), "true", True),
        (Setting("B", "bool", "0", ""), "0", False),
        (Setting("C", "choice", "a", "", ("a", "b")), "B", "b"),
        (Setting("S", "sizes", "1MB", ""), "4096, 512KB,1.5MiB", (4096, 512 << 10, 3 << 19)),
        (Setting("D", "device", "auto", ""), "CUDA:1", "cuda:1"),
    ],
)
def test_settings_parse(setting, raw, expected):
    assert load_settings({setting.name: raw}, [setting])[setting.name] == expected


@pytest.mark.parametrize(
    "setting, raw, message",
    [
        (Setting("FRAMES", "int", "0", "", minimum=0), "-3", r"FRAMES: expected an integer >= 0, got -3"),
        (Setting("FRAMES", "int", "0", "", minimum=0), "ten", r"FRAMES: expected an integer >= 0, got 'ten'"),
        (Setting("FPS", "float", "30", "", minimum=0), "nan", r"FPS: expected a number >= 0, got 'nan'"),
        (Setting("LOOP", "bool", "0", ""), "maybe", r"LOOP: expected 1/0 \(or true/false\), got 'maybe'"),
        (
            Setting("FORMAT", "choice", "codec", "", ("codec", "raw")),
            "png",
            r"FORMAT: expected one of codec, raw, got 'png'",
        ),
        (
            Setting("SIZES", "sizes", "1MB", ""),
            "1MB,lots",
            r"SIZES: expected a size such as 4096, 512KB or 16MB, got 'lots'",
        ),
        (Setting("DEVICE", "device", "auto", ""), "gpu", r"DEVICE: expected auto, cpu, cuda or cuda:N, got 'gpu'"),
    ],
)
def test_bad_settings_name_the_setting_the_value_and_what_is_allowed(setting, raw, message):
    with pytest.raises(SettingError, match=message):
        load_settings({setting.name: raw}, [setting])


def test_empty_values_mean_the_default():
    setting = Setting("N", "int", "7", "")
    assert load_settings({"N": "  "}, [setting]) == {"N": 7}
    assert load_settings({}, [setting]) == {"N": 7}


def test_sizes_are_1024_based_and_whole():
    assert parse_size("16MB") == 16 << 20 and parse_size("1GiB") == 1 << 30 and parse_size("100") == 100
    assert parse_sizes("1MB,16MB") == (1 << 20, 16 << 20)
    with pytest.raises(SettingError, match="whole number of bytes"):
        parse_size("0.3B")


def test_device_auto_is_cpu_without_cuda_and_cuda_needs_a_gpu():
    assert resolve_device("cpu") == torch.device("cpu")
    if torch.cuda.is_available():
        assert resolve_device("auto").type == "cuda"
        with pytest.raises(SettingError, match=r"DEVICE: expected cuda:0\.\.cuda:"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
    else:
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(
            SettingError, match=r"DEVICE: expected auto or cpu on this machine \(no CUDA device\), got 'cuda:0'"
        ):
            resolve_device("cuda:0")


@pytest.mark.parametrize("name", CONFIGS)
def test_every_default_loads(name):
    CONFIGS[name].load_config({})


@pytest.mark.parametrize(
    "name, env, message",
    [
        (
            "camera_source",
            {"WIDTH": "0", "HEIGHT": "0"},
            r"WIDTH/HEIGHT: expected a frame size for the synthetic camera, got 0x0",
        ),
        ("camera_source", {"WIDTH": "32", "HEIGHT": "32"}, r"WIDTH/HEIGHT: frame size: expected at least 64 px wide"),
        ("camera_source", {"SOURCE": "video"}, r"SOURCE_PATH: expected a path for SOURCE=video, got nothing"),
        ("camera_source", {"SOURCE": "camera"}, r"SOURCE_PATH: expected a device index or path for SOURCE=camera"),
        (
            "camera_source",
            {"SOURCE": "images", "SOURCE_PATH": "x", "WIDTH": "0"},
            r"WIDTH/HEIGHT: expected both set or both 0",
        ),
        ("camera_source", {"CHANNELS": "4"}, r"CHANNELS: expected one of 3, 1, got '4'"),
        (
            "tensor_sender",
            {"COUNT": "some"},
            r"COUNT: expected all, 0 \(endless\) or a number of messages up to 2\*\*32, got 'some'",
        ),
        ("tensor_sender", {"MODE": "random", "SIZES": "6"}, r"SIZES: expected non-zero multiples of 4 bytes"),
        (
            "tensor_sender",
            {"MODE": "safetensors"},
            r"FILE: expected the path of a .safetensors file for MODE=safetensors, got nothing",
        ),
        ("tensor_sender", {"CORRUPT": "1", "COUNT": "0"}, r"CORRUPT: expected 0 with COUNT=0"),
        ("tensor_sender", {"WINDOW": "0"}, r"WINDOW: expected an integer >= 1, got 0"),
        ("tensor_receiver", {"VERIFY": "some"}, r"VERIFY: expected one of full, index, none, got 'some'"),
        ("tensor_receiver", {"STRICT": "2"}, r"STRICT: expected 1/0"),
        (
            "tensor_receiver",
            {"PROGRESS_S": "0.01"},
            r"PROGRESS_S: expected 0 \(off\) or at least 0.1 seconds, got 0.01",
        ),
        ("tensor_receiver", {"JPEG_MIN_PSNR": "-1"}, r"JPEG_MIN_PSNR: expected a number >= 0, got '-1'"),
        ("jpeg_encoder", {"QUALITY": "101"}, r"QUALITY: expected an integer from 1 to 100, got 101"),
        ("jpeg_encoder", {"QUALITY": "0"}, r"QUALITY: expected an integer from 1 to 100, got 0"),
        ("jpeg_encoder", {"BATCH": "0"}, r"BATCH: expected an integer >= 1, got 0"),
        ("jpeg_encoder", {"WORKERS": "two"}, r"WORKERS: expected an integer >= 1, got 'two'"),
        ("jpeg_encoder", {"DEVICE": "gpu"}, r"DEVICE: expected auto, cpu, cuda or cuda:N, got 'gpu'"),
        ("jpeg_decoder", {"MODE": "cmyk"}, r"MODE: expected one of auto, rgb, gray, got 'cmyk'"),
        ("jpeg_decoder", {"MAX_PIXELS": "0"}, r"MAX_PIXELS: expected an integer >= 1, got 0"),
        ("jpeg_sink", {"COUNT": "-1"}, r"COUNT: expected an integer >= 0, got -1"),
    ],
)
def test_bad_node_config_is_a_clear_error(name, env, message):
    with pytest.raises(SettingError, match=message):
        CONFIGS[name].load_config(env)


def test_manifests_are_generated_from_the_settings_tables():
    assert manifest.main([]) == 0, "run: python -m tensor_codec_nodes.common.manifest --write"


@pytest.mark.parametrize("name", CONFIGS)
def test_manifest_documents_every_setting_with_type_default_and_description(name):
    document = yaml.safe_load((ROOT / "nodes" / name / "dora-node.yml").read_text())
    table = CONFIGS[name].SETTINGS
    assert list(document["env"]) == [s.name for s in table]
    for setting in table:
        entry = document["env"][setting.name]
        assert entry["type"] == setting.type and entry["default"] == setting.default and entry["description"]
    assert document["inputs"] and isinstance(document["outputs"], dict)
    example = yaml.safe_load(document["example"])
    assert any(node["path"] == document["name"] for node in example["nodes"])


def test_every_manifest_names_an_installed_console_script():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name in CONFIGS:
        document = yaml.safe_load((ROOT / "nodes" / name / "dora-node.yml").read_text())
        target = scripts[document["entrypoint"]]
        assert target == f"tensor_codec_nodes.{name}.main:main"


SPECS = {name: importlib.import_module(f"tensor_codec_nodes.{name}.config").SPEC for name in node_packages()}
PRODUCERS = [name for name, spec in SPECS.items() if any(p.id.startswith("ack*") for p in spec.inputs)]


def test_the_producers_are_the_nodes_with_ack_inputs():
    assert sorted(PRODUCERS) == ["camera_source", "jpeg_decoder", "jpeg_encoder", "tensor_sender"]


@pytest.mark.parametrize("name", CONFIGS)
def test_a_node_with_ack_inputs_has_the_delivery_group_as_it_is_and_no_other_node_has_any_of_it(name):
    """Acknowledged delivery's settings are one group (DELIVERY_SETTINGS), written once: a
    producer's table includes it whole and unchanged, in one piece; nothing else redefines a name."""
    table = CONFIGS[name].SETTINGS
    names = {s.name for s in DELIVERY_SETTINGS}
    if name in PRODUCERS:
        at = [s.name for s in table].index(DELIVERY_SETTINGS[0].name)
        assert table[at : at + len(DELIVERY_SETTINGS)] == DELIVERY_SETTINGS
        assert sum(s.name in names for s in table) == len(DELIVERY_SETTINGS)
    else:
        assert not names & {s.name for s in table}


@pytest.mark.parametrize("name", PRODUCERS)
def test_delivery_settings_keep_their_env_names_and_defaults(name):
    """Users' dataflows set WINDOW, RETRY_S and ACK_TIMEOUT_S by these names; unset, 8, 1 s, 30 s."""
    load = CONFIGS[name].load_config
    assert window_of(load({})) == {"window": 8, "retry_s": 1.0, "give_up_s": 30.0}
    given = {"WINDOW": "3", "RETRY_S": "0.5", "ACK_TIMEOUT_S": "2"}
    assert window_of(load(given)) == {"window": 3, "retry_s": 0.5, "give_up_s": 2.0}
    with pytest.raises(SettingError, match=r"^RETRY_S: expected a number >= 0.01, got '0'$"):
        load({"RETRY_S": "0"})


def test_docs_delivery_md_documents_the_delivery_group_as_the_code_has_it():
    """The group's one page: its table has each setting's default and lower bound as the code's."""
    text = (ROOT / DELIVERY_DOC).read_text()
    rows = {m[0]: m[1:] for m in re.findall(r"^\| `(\w+)` \| ([^|]+) \| an? \w+ >= ([^ |]+) \|", text, re.M)}
    assert rows == {s.name: (s.default, f"{s.minimum:g}") for s in DELIVERY_SETTINGS}
    for name in PRODUCERS:  # each producer's manifest points there
        document = yaml.safe_load((ROOT / "nodes" / name / "dora-node.yml").read_text())
        assert DELIVERY_DOC in document["inputs"]["ack*"]["description"]
        assert DELIVERY_DOC in document["env"]["WINDOW"]["description"]


def test_the_installed_node_registration_is_pyprojects_and_names_every_node_package():
    """The nodes are registered once, by their console scripts in pyproject.toml; the registry
    reads what the install made of them. A script added or renamed there without reinstalling, or a
    node package without one, fails here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    registered = scripts_of(project["project"]["scripts"].items())
    assert node_scripts() == registered, "the installed console scripts are not pyproject.toml's: run make install"
    assert set(node_packages()) == {main.parent.name for main in (ROOT / "nodes").glob("*/main.py")}
    listed = set(project["tool"]["setuptools"]["packages"])
    assert {f"tensor_codec_nodes.{name}" for name in node_packages()} <= listed, "add to [tool.setuptools] packages"


def test_the_registry_takes_only_scripts_that_run_a_nodes_main():
    scripts = {
        "tc-b": "tensor_codec_nodes.b_node.main:main",
        "tc-a": "tensor_codec_nodes.a_node.main:main",
        "tc-tool": "tensor_codec_nodes.common.manifest:main",
        "other": "somewhere.else.main:main",
        "tc-c": "tensor_codec_nodes.c_node.main:run",
    }
    assert scripts_of(scripts.items()) == {"a_node": "tc-a", "b_node": "tc-b"}
