"""What a dataflow says about its nodes, read from what dora hands a node: the descriptor
(`node.dataflow_descriptor()`: every node's inputs, env and ``deploy``), the node's config
(`node.node_config()`) and ``DORA_NODE_CONFIG`` (`parse_daemon_config`). Pure functions, no node
and no caches: `Link` reads each source once and asks these. Placement is docs/transports.md's,
"Across machines: the transport is chosen per output"."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]  # (no stubs installed unless types-PyYAML is)

from ..routing import Consumer, OutputRoute

__all__ = [
    "clean_machine",
    "route_from_descriptor",
    "input_queue",
    "env_names",
    "node_id_in",
    "node_config_problem",
    "parse_daemon_config",
    "MAX_NODE_CONFIG_CHARS",
]

log = logging.getLogger("tensor_codec")

# The kernel hands a process no environment string over 128 KiB (MAX_ARG_STRLEN), so a daemon's
# config is never near this; a config handed in another way (a Mapping) is read no further.
MAX_NODE_CONFIG_CHARS = 1 << 20

_NODE_ID = re.compile(r"^node_id:\s*(\S+)", re.MULTILINE)


def clean_machine(value: Any) -> str | None:
    """A machine id as dora gives it, or None for the default machine (absent, blank, not text)."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def node_entries(descriptor: Any) -> Iterator[dict]:
    """The node entries of a descriptor (nothing when it is not one)."""
    nodes = descriptor.get("nodes") if isinstance(descriptor, dict) else None
    for entry in nodes if isinstance(nodes, list) else ():
        if isinstance(entry, dict):
            yield entry


def _entry_of(descriptor: Any, node_id: str | None) -> dict | None:
    return next((entry for entry in node_entries(descriptor) if entry.get("id") == node_id), None)


def _placement(entry: dict, default_deploy: Any) -> tuple[str | None, str | None]:
    """-> (machine, why unknown) of one node entry of the descriptor."""
    if entry.get("path") == "dynamic":
        return None, "a dynamic node, started by hand anywhere"
    deploy = entry.get("deploy")
    if not isinstance(deploy, dict):
        deploy = default_deploy if isinstance(default_deploy, dict) else {}
    machine = clean_machine(deploy.get("machine"))
    if machine is None and deploy.get("labels"):
        return None, "placed by labels at start time"
    return machine, None


def queue_of(spec: Any) -> tuple[int | None, str | None]:
    """-> (queue_size, queue_policy) of one input of the descriptor, None where it gives none (or
    gives something dora would not take: then dora's default is the best guess)."""
    if not isinstance(spec, dict):
        return None, None
    size, policy = spec.get("queue_size"), spec.get("queue_policy")
    return (
        size if type(size) is int and size >= 0 else None,
        policy if isinstance(policy, str) and policy else None,
    )


def route_from_descriptor(descriptor: Any, node: str | None, output_id: str, machine: str | None) -> OutputRoute:
    """The consumers of `node`/`output_id` in a dataflow descriptor, each with its machine and its
    input's queue_size and queue_policy."""
    machine = clean_machine(machine)
    if node is None:
        return OutputRoute(machine, (), "this node's id is not known")
    if not isinstance(descriptor, dict) or not isinstance(descriptor.get("nodes"), list):
        return OutputRoute(machine, (), "no dataflow descriptor")
    wanted = f"{node}/{output_id}"
    consumers = []
    for entry in node_entries(descriptor):
        inputs = entry.get("inputs")
        for input_id, spec in inputs.items() if isinstance(inputs, dict) else ():
            source = spec.get("source") if isinstance(spec, dict) else spec
            if source == wanted:
                where, unknown = _placement(entry, descriptor.get("deploy"))
                size, policy = queue_of(spec)
                consumers.append(Consumer(str(entry.get("id")), str(input_id), where, unknown, size, policy))
    return OutputRoute(machine, tuple(consumers))


def input_queue(descriptor: Any, node_id: str | None, input_id: str) -> tuple[int | None, str | None]:
    """-> (queue_size, queue_policy) of node `node_id`'s input `input_id` (None where not said)."""
    entry = _entry_of(descriptor, node_id)
    inputs = entry.get("inputs") if entry is not None else None
    return queue_of(inputs.get(input_id)) if isinstance(inputs, dict) else (None, None)


def env_names(descriptor: Any, node_id: Any) -> list[str] | None:
    """The env names the descriptor's entry for `node_id` gives it, or None when it has no entry."""
    entry = _entry_of(descriptor, node_id) if isinstance(node_id, str) else None
    if entry is None:
        return None
    env = entry.get("env") or {}
    return [str(k) for k in env] if isinstance(env, dict) else []


def node_id_in(text: str) -> str | None:
    """The node id a daemon's config text names, found without parsing the whole of it."""
    match = _NODE_ID.search(text)
    return match.group(1) if match else None


# libyaml's loader where PyYAML was built with it: a config carries the whole dataflow.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _IgnoreTags(_SafeLoader):
    """YAML as the daemon writes DORA_NODE_CONFIG: tags (a Rust enum's variant, ``!Tcp``) read as None."""


_IgnoreTags.add_multi_constructor("!", lambda loader, suffix, node: None)


def _not_utf8(text: str) -> str | None:
    """What in `text` is not UTF-8, or None. Bytes that are not UTF-8 in an environment variable
    reach Python as surrogate escapes (0xff as U+DCFF): shown as the byte they were."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        char = ord(text[e.start])
        what = f"the byte 0x{char - 0xDC00:02x}" if 0xDC80 <= char <= 0xDCFF else f"the code point U+{char:04X}"
        return f"{what} at character {e.start}"
    return None


def _first_alias(text: str) -> str | None:
    """The first YAML anchor or alias in `text` (its kind, name and place), or None. Tokens only:
    scanning expands nothing and stops at the first. Text YAML cannot scan is left to the parse."""
    try:
        for token in yaml.scan(text, Loader=_SafeLoader):
            if isinstance(token, (yaml.AnchorToken, yaml.AliasToken)):
                kind, sign = ("an anchor", "&") if isinstance(token, yaml.AnchorToken) else ("an alias", "*")
                place = token.start_mark
                return f"{kind} ({sign}{token.value:.40}) at line {place.line + 1} column {place.column + 1}"
    except yaml.YAMLError:
        return None
    return None


def node_config_problem(text: str) -> str | None:
    """Why DORA_NODE_CONFIG's `text` must not be parsed (the variable, what was expected, what came),
    or None. A daemon writes UTF-8 YAML without anchors or aliases (serde_yaml emits none); an alias
    repeats a whole subtree wherever it is read, so 569 bytes of nested aliases grew to billions of
    values and ended a node with a MemoryError."""
    if len(text) > MAX_NODE_CONFIG_CHARS:
        return f"DORA_NODE_CONFIG: expected at most {MAX_NODE_CONFIG_CHARS} characters, got {len(text)}"
    not_utf8 = _not_utf8(text)
    if not_utf8 is not None:
        return f"DORA_NODE_CONFIG: expected UTF-8 text (the YAML a dora daemon writes), got {not_utf8}"
    alias = _first_alias(text)
    if alias is not None:
        return f"DORA_NODE_CONFIG: expected YAML without anchors or aliases (a dora daemon writes none), got {alias}"
    return None


def parse_daemon_config(text: str | None) -> dict | None:
    """DORA_NODE_CONFIG's `text` parsed (`_IgnoreTags`): ``node_id``, ``run_config`` (the node's inputs
    and outputs), ``dataflow_descriptor``, ``output_routing``. None when absent, not a YAML mapping (not
    started by a daemon), or not to be parsed (`node_config_problem`: the project's nodes refuse to start)."""
    if not text:
        return None
    problem = node_config_problem(text)
    if problem is not None:
        log.debug("%s: not read", problem)
        return None
    try:
        config = yaml.load(text, Loader=_IgnoreTags)  # a SafeLoader that ignores tags
    except yaml.YAMLError as e:
        log.debug("DORA_NODE_CONFIG is not YAML: %s", e)
        return None
    return config if isinstance(config, dict) else None
