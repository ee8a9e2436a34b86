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

from .settings import Setting

NODE_PACKAGES = ("camera_source", "tensor_sender", "tensor_receiver", "jpeg_encoder", "jpeg_decoder", "jpeg_sink")
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
    entry = {"type": s.type, "default": s.default, "description": s.description}
    if s.choices:
        entry["choices"] = list(s.choices)
    if s.minimum is not None:
        entry["minimum"] = s.minimum
    if s.maximum is not None:
        entry["maximum"] = s.maximum
    return entry


def _port(p: Port) -> dict:
    entry: dict = {"description": p.description}
    if p.optional:
        entry["optional"] = True
    if p.metadata:
        entry["metadata"] = dict(p.metadata)
    return entry


def render(spec: NodeSpec) -> str:
    document = {
        "name": spec.name,
        "description": spec.description,
        "entrypoint": spec.name,
        "build": "pip install dora-tensor-codec",
        "install_from_source": "pip install -e <path of this repository>",
        "inputs": {p.id: _port(p) for p in spec.inputs},
        "outputs": {p.id: _port(p) for p in spec.outputs},
        "env": {s.name: _setting(s) for s in spec.settings},
        "example": spec.example,
    }
    header = "# Generated from the node's spec.py and settings table: python -m tensor_codec_nodes.common.manifest --write\n"
    return header + yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)


def manifests() -> dict[Path, str]:
    out = {}
    for package in NODE_PACKAGES:
        module = importlib.import_module(f"tensor_codec_nodes.{package}.spec")
        path = Path(module.__file__).with_name(MANIFEST)
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
