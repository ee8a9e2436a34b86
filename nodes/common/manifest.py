"""Each node's `dora-node.yml`, written from the same tables the code uses.

    python -m tensor_codec_nodes.common.manifest          # check every manifest is up to date
    python -m tensor_codec_nodes.common.manifest --write  # rewrite them

A test runs the check, so a setting added to the code without its manifest entry fails CI.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .registry import node_packages
from .settings import Setting

MANIFEST = "dora-node.yml"


@dataclass(frozen=True)
class Port:
    id: str
    description: str
    metadata: dict[str, str] = field(default_factory=dict)
    optional: bool = False


@dataclass(frozen=True)
class NodeSpec:
    name: str  # also the console script
    description: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    settings: tuple[Setting, ...]
    example: str


def _setting(s: Setting) -> dict:
    # Every setting has a default: none is required outright, some only with another's value.
    entry = {"type": s.type, "default": s.default, "required": False, "description": s.description}
    if s.required_when:
        entry["required_when"] = s.required_when
    if s.choices:
        entry["choices"] = list(s.choices)
    if s.minimum is not None:
        entry["minimum"] = s.minimum
    if s.maximum is not None:
        entry["maximum"] = s.maximum
    return entry


def _port(p: Port) -> dict:
    entry: dict = {"required": not p.optional, "description": p.description}
    if p.metadata:
        entry["metadata"] = dict(p.metadata)
    return entry


def render(spec: NodeSpec) -> str:
    document = {
        "name": spec.name,
        "description": spec.description,
        "entrypoint": spec.name,
        # No index serves the project: these install it from a checkout (README: Install).
        "build": "pip install <path of a dora-tensor-codec checkout>",
        "install_from_wheel": (
            "make wheel in the checkout, then pip install dist/dora_tensor_codec-0.1.0-py3-none-any.whl"
        ),
        "inputs": {p.id: _port(p) for p in spec.inputs},
        "outputs": {p.id: _port(p) for p in spec.outputs},
        "env": {s.name: _setting(s) for s in spec.settings},
        "example": spec.example,
    }
    header = (
        "# Generated from the node's config.py (SPEC, settings): python -m tensor_codec_nodes.common.manifest --write\n"
    )
    return header + yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the example dataflow) as literal blocks: readable YAML, not one
    string of \n escapes."""


def _str(dumper: yaml.SafeDumper, text: str):
    style = "|" if "\n" in text.rstrip("\n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def manifests() -> dict[Path, str]:
    out = {}
    for package in node_packages():
        module = importlib.import_module(f"tensor_codec_nodes.{package}.config")
        path = Path(str(module.__file__)).with_name(MANIFEST)
        out[path] = render(module.SPEC)
    return out


def main(argv: list[str]) -> int:
    stale = []
    for path, text in manifests().items():
        if "--write" in argv:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(str(path))
    if stale:
        print("out of date (run with --write): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
