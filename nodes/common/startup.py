"""What every tc-* node does before it joins a dataflow: answer `--help` from its spec, and warn
about settings and wiring that look wrong.

Each check here catches a mistake that otherwise runs to the end silently: an env name with a
typo (`WIDHT`) leaves the setting at its default; an input wired under an id the node does not
read (`image:` instead of `frames:`) delivers messages the node ignores, so it finishes with 0
frames and exit status 0; an output the node sends on but the dataflow does not declare drops
everything. The help text and the checks read the same `NodeSpec` the manifest is written from.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

from .manifest import NodeSpec, Port
from .settings import Setting

__all__ = [
    "help_text",
    "answer_command_line",
    "outside_dora",
    "close_setting_names",
    "wiring_problems",
    "preflight",
    "join_dataflow",
]

WIDTH = 100
# Environment names the project reads besides the settings tables (tensor_codec's own limits and
# transport choice, dora's): never "close to a setting" by mistake.
_OTHER_PREFIXES = ("TC_", "DORA_", "CUDA_", "RUST_", "PYTHON", "UV_")


# ------------------------------------------------------------------------------------ --help
def _wrap(text: str, indent: int) -> str:
    return textwrap.fill(" ".join(text.split()), WIDTH, initial_indent=" " * indent, subsequent_indent=" " * indent)


def _port_lines(port: Port) -> list[str]:
    flag = " (optional)" if port.optional else ""
    description = port.description.removeprefix("Optional. ") if port.optional else port.description
    lines = [f"  {port.id}{flag}", _wrap(description, 6)]
    for key, meaning in port.metadata.items():
        lines.append(_wrap(f"{key}: {meaning}", 8))
    return lines


def _setting_lines(s: Setting) -> list[str]:
    allowed = " | ".join(s.choices) if s.choices else s.type
    if s.minimum is not None or s.maximum is not None:
        low = "" if s.minimum is None else f"{s.minimum:g}"
        high = "" if s.maximum is None else f"{s.maximum:g}"
        allowed += f", {low}..{high}"
    default = repr(s.default) if s.default == "" else s.default
    when = f"; required when {s.required_when}" if s.required_when else ""
    return [f"  {s.name} = {default}    ({allowed}{when})", _wrap(s.description, 6)]


def help_text(spec: NodeSpec) -> str:
    """The node's inputs, outputs and settings with their defaults, as `--help` prints them."""
    out = [f"{spec.name}: a dora node", _wrap(spec.description, 2), ""]
    out.append("Inputs (wired in the dataflow's `inputs:`):")
    for port in spec.inputs:
        out += _port_lines(port)
    out += ["", "Outputs (declare the ones you use in `outputs:`; metadata keys indented):"]
    for port in spec.outputs:
        out += _port_lines(port)
    out += ["", "Settings (environment variables, the dataflow's `env:`; shown with their defaults):"]
    for setting in spec.settings:
        out += _setting_lines(setting)
    out += ["", "Example dataflow:", textwrap.indent(spec.example.rstrip(), "  ")]
    out += [
        "",
        f"Run it from a dataflow: `path: {spec.name}` (its directory must be on PATH), then `dora run dataflow.yml`.",
    ]
    return "\n".join(out)


def answer_command_line(spec: NodeSpec, argv: list[str] | None = None) -> int | None:
    """`--help` / `-h`: print the help, -> 0. Any other argument: say that settings are
    environment variables, -> 2. No arguments: None (go on)."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        return None
    if args[0] in ("-h", "--help"):
        try:
            print(help_text(spec), flush=True)
        except BrokenPipeError:  # `--help | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    print(
        f"{spec.name}: unexpected argument {args[0]!r:.60}: this node takes its settings from environment variables "
        f"(a dataflow's `env:`); `{spec.name} --help` lists them",
        file=sys.stderr,
    )
    return 2


def outside_dora(spec: NodeSpec, env: Mapping[str, str] = os.environ) -> bool:
    """True (after saying so on stderr) when the process was not started by a dora daemon:
    dora's `Node()` would end it with a Rust backtrace about DORA_NODE_CONFIG."""
    if "DORA_NODE_CONFIG" in env or "DORA_TEST_WITH_INPUTS" in env:
        return False
    print(
        f"{spec.name} is a dora node: start it from a dataflow (`path: {spec.name}` in the YAML, then "
        f"`dora run dataflow.yml`); `{spec.name} --help` lists its inputs, outputs and settings",
        file=sys.stderr,
    )
    return True


# ------------------------------------------------------------------------------------ checks
def close_setting_names(spec: NodeSpec, names: Iterable[str]) -> list[tuple[str, str]]:
    """(name, setting) for each UPPERCASE name that is not a setting of the node but close to one
    (a typo: WIDHT -> WIDTH). Names the project reads elsewhere (TC_*, DORA_*, ...) are skipped."""
    known = [s.name for s in spec.settings]
    found = []
    for name in sorted(set(names)):
        if name in known or not name.isupper() or name.startswith(_OTHER_PREFIXES):
            continue
        match = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        if match:
            found.append((name, match[0]))
    return found


def _matches(port: Port, port_id: str) -> bool:
    if port.id.startswith("<"):  # "<any id>"
        return True
    if port.id.endswith("*"):
        return port_id.startswith(port.id[:-1])
    return port_id == port.id


def _names(ports: Iterable[Port]) -> str:
    return ", ".join(f"`{p.id}`" for p in ports)


def wiring_problems(spec: NodeSpec, inputs: Iterable[str], outputs: Iterable[str]) -> list[str]:
    """What looks wrong in how the dataflow wires this node: inputs it does not read, inputs it
    needs that are not wired, outputs it does not send, no outputs at all."""
    inputs, outputs = sorted(set(inputs)), sorted(set(outputs))
    problems = []
    for port_id in inputs:
        if not any(_matches(p, port_id) for p in spec.inputs):
            guess = difflib.get_close_matches(
                port_id, [p.id for p in spec.inputs if not p.id.startswith("<")], n=1, cutoff=0.0
            )
            hint = f"; did you mean `{guess[0]}`?" if guess else ""
            problems.append(
                f"input `{port_id}` is not one this node reads ({_names(spec.inputs)}): its messages are ignored{hint}"
            )
    for port in spec.inputs:
        if not port.optional and not port.id.startswith("<") and not any(_matches(port, i) for i in inputs):
            problems.append(
                f"input `{port.id}` is not wired: this node gets nothing to work on (wire it as `{port.id}: "
                "<node>/<output>`)"
            )
    for port_id in outputs:
        if not any(_matches(p, port_id) for p in spec.outputs):
            problems.append(f"output `{port_id}` is not one this node sends ({_names(spec.outputs)})")
    needed = [p for p in spec.outputs if not p.optional]
    if needed and not outputs:
        problems.append(f"declares no outputs: dora drops what this node sends (add `outputs: [{needed[0].id}]`)")
    return problems


def _this_nodes_env(node: Any) -> list[str] | None:
    """The env names the dataflow YAML gives this node, or None when dora does not say."""
    from tensor_codec.dora_adapter import node_id as this_node_id

    try:
        descriptor = node.dataflow_descriptor()
        me = this_node_id(node)
        for entry in descriptor.get("nodes") or []:
            if isinstance(entry, dict) and entry.get("id") == me:
                env = entry.get("env") or {}
                return [str(k) for k in env] if isinstance(env, dict) else []
    except Exception:  # a test double, or a dora without the descriptor
        return None
    return None


def preflight(node: Any, spec: NodeSpec, log: logging.Logger) -> list[str]:
    """Warn (once, at start) about env names close to a setting and about the wiring; -> the
    warnings. Never fails the node: the dataflow may be right in a way this cannot see."""
    from .runtime import declared_inputs, declared_outputs

    names = _this_nodes_env(node)
    warnings = [
        f"env {name} is not a setting of {spec.name}: did you mean {setting}? ({setting} keeps its default or its "
        "own value)"
        for name, setting in close_setting_names(spec, os.environ if names is None else names)
    ]
    try:
        config = node.node_config()
    except Exception:
        config = None
    if isinstance(config, dict):  # without it (a test double) nothing is known about the wiring
        warnings += wiring_problems(spec, declared_inputs(node), declared_outputs(node))
    for text in warnings:
        log.warning("%s", text)
    return warnings


def join_dataflow(spec: NodeSpec, log: logging.Logger) -> Any | None:
    """The node's dora `Node`, once joined: its wiring and env checked (`preflight`) and start-up's
    objects out of the garbage collector's way (`settle_heap`); None when the process was not
    started by dora (`outside_dora` said so): the node's main then exits with status 2."""
    if outside_dora(spec):
        return None
    from dora import Node

    from .runtime import settle_heap

    node = Node()
    preflight(node, spec, log)
    settle_heap()
    return node
