"""Reusable dora nodes built on tensor_codec (installed as the `tensor_codec_nodes` package).

Each node is a sub-package with a thin `main()` (its console script), a pure `load_config(env)`
and a per-event handler that is tested without a daemon, plus a `dora-node.yml` manifest. The
nodes are registered once, by their console scripts in pyproject.toml (`tc-<name>`); what lists
them reads that registration (`common.registry`).

Importing the package changes nothing in the process (its environment included): what a node
process needs before torch loads is set by the node's console script (`common.loop.console_main`).
"""
