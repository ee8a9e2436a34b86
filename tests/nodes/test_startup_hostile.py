"""A hostile DORA_NODE_CONFIG (what the daemon hands a node's process) ends start-up with exit
status 2 and one line naming it: never a traceback, a MemoryError or exit status 1."""

from __future__ import annotations

import logging
import os
import subprocess

import pytest

from tensor_codec.dora.descriptor import MAX_NODE_CONFIG_CHARS, node_config_problem, parse_daemon_config
from tensor_codec_nodes.common import startup
from tensor_codec_nodes.tensor_receiver.config import SPEC as RECEIVER
from tests.support.dora import node_script

# What a dora 1.1 daemon writes (shortened): tags (a Rust enum's variant) but no anchors or aliases.
DAEMON_CONFIG = """\
dataflow_id: 0195d0a2-0000-7000-8000-000000000000
node_id: receiver
run_config:
  inputs:
    tensors: !User
      source: sender
      output: tensors
  outputs: []
daemon_communication: !Tcp
  socket_addr: 127.0.0.1:53291
dataflow_descriptor:
  nodes:
  - id: receiver
    path: tc-tensor-receiver
"""


def alias_bomb(levels: int = 9) -> str:
    """About 570 bytes of nested YAML aliases: 9**10 values wherever they are read (the wired inputs,
    which start-up turned into strings: a MemoryError)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    lines += ["node_id: receiver", f"run_config: {{inputs: *a{levels}, outputs: []}}"]
    return "\n".join(lines)


def test_the_codec_never_parses_a_config_a_node_would_refuse():
    """tc.send reads DORA_NODE_CONFIG too (the output's route): the same text it refuses, never a
    MemoryError or a UnicodeEncodeError out of a send."""
    assert parse_daemon_config(DAEMON_CONFIG)["node_id"] == "receiver"
    for hostile in (alias_bomb(), DAEMON_CONFIG + "# \udcff", DAEMON_CONFIG + "#" * MAX_NODE_CONFIG_CHARS):
        assert node_config_problem(hostile) is not None and parse_daemon_config(hostile) is None


def test_the_config_a_daemon_writes_is_read():
    assert node_config_problem(DAEMON_CONFIG) is None
    assert startup.dora_node_config({"DORA_NODE_CONFIG": DAEMON_CONFIG})["node_id"] == "receiver"


def test_yaml_anchors_and_aliases_are_refused_naming_the_variable_and_where():
    assert node_config_problem(alias_bomb()) == (
        "DORA_NODE_CONFIG: expected YAML without anchors or aliases (a dora daemon writes none), got an anchor "
        "(&a0) at line 1 column 5"
    )
    lone_alias = DAEMON_CONFIG + "extra: *nowhere\n"
    assert node_config_problem(lone_alias).endswith("got an alias (*nowhere) at line 15 column 8")
    with pytest.raises(startup.HostileNodeConfig, match="^DORA_NODE_CONFIG: expected YAML without anchors"):
        startup.dora_node_config({"DORA_NODE_CONFIG": alias_bomb()})


def test_bytes_that_are_not_utf8_are_refused_as_the_bytes_they_were():
    """Such bytes in an environment variable reach Python as surrogate escapes, which the YAML
    parser could not encode (UnicodeEncodeError, exit status 1)."""
    text = os.fsdecode(b"node_id: receiver\nx: \xff\xfe\n")
    assert node_config_problem(text) == (
        "DORA_NODE_CONFIG: expected UTF-8 text (the YAML a dora daemon writes), got the byte 0xff at character 21"
    )
    assert node_config_problem("node_id: \ud800").endswith("got the code point U+D800 at character 9")


def test_a_config_no_environment_could_hold_is_not_read():
    text = DAEMON_CONFIG + "#" * MAX_NODE_CONFIG_CHARS
    assert node_config_problem(text) == (
        f"DORA_NODE_CONFIG: expected at most {MAX_NODE_CONFIG_CHARS} characters, got {len(text)}"
    )


def test_text_yaml_cannot_scan_is_left_to_the_parse():
    assert node_config_problem("node_id: [unclosed") is None
    assert startup.dora_node_config({"DORA_NODE_CONFIG": "node_id: [unclosed"}) is None


def test_a_hostile_config_is_one_error_line_and_the_node_never_joins(monkeypatch, caplog):
    import dora

    def joined():
        raise AssertionError("the node joined the dataflow")

    monkeypatch.setattr(dora, "Node", joined)
    # a small bomb (9**4 values): should aliases ever be read again, this process's memory is safe
    monkeypatch.setenv("DORA_NODE_CONFIG", alias_bomb(levels=3))
    with caplog.at_level(logging.INFO):
        assert startup.join_dataflow(RECEIVER, logging.getLogger("t")) is None
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.ERROR,
            "DORA_NODE_CONFIG: expected YAML without anchors or aliases (a dora daemon writes none), got an anchor "
            "(&a0) at line 1 column 5: tc-tensor-receiver is not starting (exit status 2)",
        )
    ]


def _limit_memory() -> None:
    """Should a node read the bomb again, a MemoryError at 8 GiB, not the machine's memory."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


@pytest.mark.slow  # a fresh interpreter that loads torch
@pytest.mark.parametrize(
    "config, said",
    [
        (alias_bomb(), "expected YAML without anchors or aliases"),
        (os.fsdecode(b"node_id: receiver\nx: \xff\xfe\n"), "expected UTF-8 text"),
    ],
    ids=["alias-bomb", "not-utf8"],
)
def test_a_nodes_start_up_refuses_a_hostile_config_with_exit_status_2_and_one_line(config, said):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DORA_")}
    env.update(DORA_NODE_CONFIG=config, DEVICE="cpu")  # subprocess writes the surrogates back as the bytes
    proc = subprocess.run(
        [node_script(RECEIVER.name)],
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
        preexec_fn=_limit_memory,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and f"ERROR DORA_NODE_CONFIG: {said}" in lines[0], proc.stderr[-2000:]
    assert lines[0].endswith("tc-tensor-receiver is not starting (exit status 2)")
