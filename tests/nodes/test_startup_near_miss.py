"""The start-up near-miss rule: an env name a user most likely meant as a setting (one slip of the
hand) refuses the node; a name only close to one (a word of its own a wrapper or a library may
set) is a warning naming the setting it resembles."""

from __future__ import annotations

import importlib
import logging

import pytest

from tensor_codec_nodes.common import startup
from tensor_codec_nodes.common.registry import node_packages

SPECS = {
    spec.name: spec
    for spec in (importlib.import_module(f"tensor_codec_nodes.{p}.config").SPEC for p in node_packages())
}


def settings_of(node: str) -> set[str]:
    return {s.name for s in SPECS[node].settings}


# (node, env name, the real setting it resembles): each refused before, though a wrapper may set it
RESEMBLING = [
    ("tc-tensor-receiver", "DEVICE_ID", "DEVICE"),
    ("tc-jpeg-decoder", "MODEL", "MODE"),
    ("tc-tensor-sender", "MODEL", "MODE"),
    ("tc-tensor-sender", "SIZE", "SIZES"),
    ("tc-tensor-sender", "COUNTS", "COUNT"),
    ("tc-jpeg-sink", "COUNTS", "COUNT"),
    ("tc-tensor-receiver", "REPORTS", "REPORT"),
    ("tc-monitor", "PERIOD", "PERIOD_S"),
    ("tc-camera-source", "WINDOWS", "WINDOW"),
]

# (node, env name, the setting it is a slip of)
SLIPS = [
    ("tc-tensor-receiver", "DEVIEC", "DEVICE"),  # two neighbours swapped
    ("tc-camera-source", "WINDWO", "WINDOW"),
    ("tc-tensor-receiver", "device", "DEVICE"),  # another case
    ("tc-tensor-sender", "Sizes", "SIZES"),
    ("tc-camera-source", "FRAMEZ", "FRAMES"),  # a letter wrong
    ("tc-jpeg-encoder", "QUALTY", "QUALITY"),  # a letter missing inside
    ("tc-camera-source", "FRAMMES", "FRAMES"),  # one too many inside
    ("tc-tensor-receiver", "verfiy", "VERIFY"),  # another case and two swapped
]


@pytest.mark.parametrize("node, name, setting", RESEMBLING)
def test_a_name_only_close_to_a_setting_is_warned_naming_it_not_refused(node, name, setting):
    spec = SPECS[node]
    assert setting in settings_of(node) and name not in settings_of(node)
    for from_dataflow in (True, False):  # the dataflow's env, or the process's whole environment
        assert startup.env_problems(spec, [name], from_dataflow=from_dataflow) == (
            [],
            [
                f"env {name} is not a setting of {node}: the node ignores it (it resembles {setting}; a library may "
                f"read it; `{node} --help` lists its settings)"
            ],
        )


@pytest.mark.parametrize("node, name, setting", SLIPS)
def test_a_slip_of_a_settings_name_still_refuses_the_node(node, name, setting):
    assert setting in settings_of(node) and name not in settings_of(node)
    problems = startup.env_problems(SPECS[node], [name], from_dataflow=True)
    assert problems == (
        [f"env {name} is not a setting of {node}: did you mean {setting}? (`{node} --help` lists its settings)"],
        [],
    )


@pytest.mark.parametrize(
    "name, setting, slip",
    [
        ("FRAMEZ", "FRAMES", True),
        ("frames", "FRAMES", True),
        ("HEIGTH", "HEIGHT", True),
        ("QUALTY", "QUALITY", True),
        ("QUALIITY", "QUALITY", True),
        ("MODEL", "MODE", False),  # a letter more at the end: another word
        ("SIZE", "SIZES", False),  # a letter less at the end
        ("ODE", "MODE", False),  # a letter less at the start
        ("DEVICE_ID", "DEVICE", False),
        ("HIEGTH", "HEIGHT", False),  # two slips
        ("DEVCIE", "DEVICE", True),
        ("DECIVE", "DEVICE", False),  # swapped, but not neighbours
    ],
)
def test_what_makes_a_slip(name, setting, slip):
    assert startup.is_slip(name, setting) is slip


def test_preflight_logs_a_resembling_name_as_one_warning_and_starts(caplog):
    node = "tc-tensor-sender"
    config = {
        "node_id": "sender",
        "run_config": {"inputs": {}, "outputs": ["tensors"]},
        "dataflow_descriptor": {"nodes": [{"id": "sender", "env": {"SIZE": "64", "MODE": "suite"}}]},
    }
    with caplog.at_level(logging.WARNING):
        problems = startup.preflight(config, SPECS[node], logging.getLogger("t"))
    assert problems.errors == []
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            f"env SIZE is not a setting of {node}: the node ignores it (it resembles SIZES; a library may read it; "
            f"`{node} --help` lists its settings)",
        )
    ]
