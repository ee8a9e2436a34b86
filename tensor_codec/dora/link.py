"""`Link`: what this process's dora Node is (its id, machine, config, the daemon's config
``DORA_NODE_CONFIG`` and the dataflow descriptor), and an `Output` per output port. What dora
says about a node does not change while it runs: each fact is read on first use and kept.
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import Any, ClassVar

from ..routing import OutputRoute
from . import descriptor as D
from .limits import DEFAULT_POOL_BYTES
from .output import Output

__all__ = ["Link"]

_ATTRIBUTE = "_tensor_codec_link"  # where a node that takes attributes keeps its link


class Link:
    """This process's dora Node (`node`: dora's, or a test double with the same methods)."""

    # A dora Node takes neither attributes nor weak references, and a process has one: its link
    # is held here until `close()` (the project's nodes close it when their loop ends: dora's Node
    # leaves the dataflow only when freed) or another such node's link takes its place. A node
    # that takes attributes (a test double) keeps its own link (`_ATTRIBUTE`): found by
    # identity, whatever the node's `==`, and freed with it.
    _held: ClassVar[Link | None] = None

    @classmethod
    def of(cls, node: Any, *, daemon_config: dict | None = None) -> Link:
        """The link of `node` (made on first use; `daemon_config`: DORA_NODE_CONFIG as the caller
        parsed it already, for a link made now; None: read on first use)."""
        link = cls._held
        if link is not None and link.node is node:
            return link
        link = getattr(node, _ATTRIBUTE, None)
        if isinstance(link, Link) and link.node is node:
            return link
        link = cls(node)
        if daemon_config is not None:
            link.daemon_config = daemon_config
        try:
            setattr(node, _ATTRIBUTE, link)
        except (AttributeError, TypeError):  # dora's Node
            cls._held = link
        return link

    def __init__(self, node: Any):
        self.node = node
        try:
            config = node.node_config()  # inputs, outputs, pool size, id
        except Exception:  # a test double, or a dora without it
            config = {}
        self.config: dict = config if isinstance(config, dict) else {}
        self.machine = D.clean_machine(os.environ.get("DORA_MACHINE_ID"))  # None: the default machine
        found = self.config.get("node_id")
        self.node_id: str | None = found if isinstance(found, str) else D.node_id_in(_daemon_text())
        self.outputs: dict[str, Output] = {}

    def close(self) -> None:
        """Stop holding the node: `of` forgets this link (its Outputs go with it)."""
        if Link._held is self:
            Link._held = None
        elif getattr(self.node, _ATTRIBUTE, None) is self:
            delattr(self.node, _ATTRIBUTE)

    @cached_property
    def descriptor(self) -> Any:
        """The dataflow descriptor dora hands the node (None: it cannot say)."""
        try:
            return self.node.dataflow_descriptor()
        except Exception:  # a test double, or a dora without it
            return None

    @cached_property
    def daemon_config(self) -> dict | None:
        """``DORA_NODE_CONFIG`` parsed (descriptor.parse_daemon_config), None where absent or unreadable."""
        return D.parse_daemon_config(_daemon_text())

    @property
    def name(self) -> str:
        """The node's id for messages ("<this node>" where dora does not say)."""
        return self.node_id or "<this node>"

    @cached_property
    def pool(self) -> tuple[int, str]:
        """-> (bytes, where the value comes from) of the node's shared-memory pool."""
        pool = self.config.get("shared_memory_pool_size")
        env = os.environ.get("DORA_NODE_SHM_POOL_SIZE", "")
        if isinstance(pool, int):
            return pool, "the dataflow YAML"
        if env.isdigit():
            return int(env), "DORA_NODE_SHM_POOL_SIZE"
        return DEFAULT_POOL_BYTES, "dora's default"

    def declared_inputs(self) -> set[str]:
        """The input ids the dataflow YAML gives this node (optional inputs switch features on)."""
        return set(self.config.get("inputs") or {})

    def declared_outputs(self) -> set[str]:
        """The output ids the dataflow YAML gives this node (dora ignores sends to undeclared ones)."""
        return set(self.config.get("outputs") or [])

    def env_names(self) -> list[str] | None:
        """The env names the dataflow YAML gives this node, or None when dora does not say."""
        return D.env_names(self.descriptor, self.node_id)

    def input_queue(self, input_id: str) -> tuple[int | None, str | None]:
        """-> (queue_size, queue_policy) of this node's input `input_id` (None: not said, dora's default)."""
        return D.input_queue(self.descriptor, self.node_id, input_id)

    def route(self, output_id: str) -> OutputRoute:
        """Where the consumers of `output_id` run, and their queues."""
        return self.output(output_id).route

    def output_routing(self, output_id: str) -> Any:
        """The daemon's routing entry of `output_id` (DORA_NODE_CONFIG's ``output_routing``:
        ``{daemon_only: bool, ...}``), None where it gives none."""
        config = self.daemon_config
        routing = config.get("output_routing") if config is not None else None
        return routing.get(output_id) if isinstance(routing, dict) else None

    def output(self, output_id: str) -> Output:
        """The Output of port `output_id` (one per port, kept)."""
        out = self.outputs.get(output_id)
        if out is None:
            out = self.outputs[output_id] = Output(self, output_id)
        return out


def _daemon_text() -> str:
    return os.environ.get("DORA_NODE_CONFIG", "")
