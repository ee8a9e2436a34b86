"""The project's dataflows with every node on CUDA, for `make gpu-check`.

DEVICE=auto already picks a GPU where there is one; the check says ``cuda`` outright so a node
that cannot use it fails instead of quietly falling back. Nodes are named by their console
scripts' absolute paths (beside this interpreter), so the copy runs from any directory.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import yaml

SCRIPT_PREFIX = "tc-"


def has_device_setting(script: str) -> bool:
    """Whether the node behind a console script (tc-tensor-sender -> tensor_sender) has DEVICE."""
    if not script.startswith(SCRIPT_PREFIX):
        return False
    package = script[len(SCRIPT_PREFIX) :].replace("-", "_")
    try:
        config = importlib.import_module(f"tensor_codec_nodes.{package}.config")
    except ImportError:
        return False
    return any(setting.name == "DEVICE" for setting in getattr(config, "SETTINGS", ()))


def variant_on(device: str, source: Path, dest_dir: Path, bindir: Path) -> tuple[Path, list[str], list[str]]:
    """Write `source` into `dest_dir` with DEVICE=`device` on every node that has the setting.
    -> (the new file, ids of the nodes placed, ids of the nodes without a device)."""
    data = yaml.safe_load(source.read_text())
    placed, without = [], []
    for node in data["nodes"]:
        script = str(node.get("path", ""))
        beside = bindir / script
        if script and beside.exists():
            node["path"] = str(beside)
        elif script and shutil.which(script):
            node["path"] = shutil.which(script)
        if has_device_setting(script):
            node.setdefault("env", {})["DEVICE"] = device
            placed.append(node["id"])
        else:
            without.append(node["id"])
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / source.name
    out.write_text(
        f"# {source.name} with every node on {device} (tools/gpu_check/flows.py)\n"
        + yaml.safe_dump(data, sort_keys=False)
    )
    return out, placed, without
