"""The project's nodes, from their one registration: each node's console script in pyproject.toml's
`[project.scripts]`, `tc-<name> = "tensor_codec_nodes.<package>.main:main"`. A node is its package
(nodes/<package>/) plus that line; what lists the nodes (the manifest generator, the tests) reads
them from here, and this reads them from the installed distribution's metadata (what pip made of
that table): nothing imported, no checkout needed. tests/codec/test_hygiene.py checks that every
package with a main.py is registered; tests/nodes/test_node_settings.py that the installed metadata
says what pyproject.toml says (else: `make install`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from importlib import metadata

__all__ = ["PROJECT", "NODES_PACKAGE", "scripts_of", "node_scripts", "node_packages"]

PROJECT = "dora-tensor-codec"  # the distribution, as pyproject.toml's [project] name says
NODES_PACKAGE = "tensor_codec_nodes"


def scripts_of(console_scripts: Iterable[tuple[str, str]]) -> dict[str, str]:
    """{node package: its console script} among (script name, "module:function") pairs: those that
    run `tensor_codec_nodes.<package>.main:main`, in the scripts' names' order."""
    found = {}
    for name, target in sorted(console_scripts):
        module, _, function = target.partition(":")
        parts = module.split(".")
        if parts[0] == NODES_PACKAGE and len(parts) == 3 and parts[2] == "main" and function == "main":
            found[parts[1]] = name
    return found


# Read when asked, not on import: startup.py (every node's --help and start) imports PROJECT.
@functools.cache
def node_scripts() -> dict[str, str]:
    """{node package: console script} of the installed project, e.g. camera_source: tc-camera-source."""
    try:
        entry_points = metadata.distribution(PROJECT).entry_points
    except metadata.PackageNotFoundError:
        raise RuntimeError(
            f"{PROJECT} is not installed, so its nodes' registration (its console scripts) cannot be read: "
            "pip install the checkout (make install)"
        ) from None
    return scripts_of((e.name, e.value) for e in entry_points.select(group="console_scripts"))


def node_packages() -> tuple[str, ...]:
    """The node packages ("camera_source", ...), as `node_scripts` reads them."""
    return tuple(node_scripts())
