"""The package never deserializes code or objects, and never touches CUDA unless asked."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tensor_codec"
SOURCES = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "nodes").rglob("*.py"))

FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_ATTRIBUTES = {("torch", "load"), ("np", "load"), ("numpy", "load")}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pickle_eval_or_torch_load(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not {a.name.split(".")[0] for a in node.names} & FORBIDDEN_MODULES, f"{path}:{node.lineno}"
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] not in FORBIDDEN_MODULES, f"{path}:{node.lineno}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{path}:{node.lineno}: {node.func.id}()"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            assert (node.value.id, node.attr) not in FORBIDDEN_ATTRIBUTES, f"{path}:{node.lineno}"


@pytest.mark.slow  # a fresh interpreter
def test_import_and_host_round_trip_never_initialize_cuda():
    code = (
        "import json, sys, torch, tensor_codec as tc\n"
        "loaded_at_import = 'tensor_codec.transports.host' in sys.modules\n"
        "v, m = tc.encode({'x': torch.ones(3)}); tc.decode(v, m)\n"
        "print(json.dumps({'host_at_import': loaded_at_import, 'cuda_initialized': torch.cuda.is_initialized()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"host_at_import": False, "cuda_initialized": False}


def test_every_package_and_console_script_is_declared():
    """A package folder missing from pyproject's explicit list installs without it (an editable
    install hides this; a wheel does not): every folder with an __init__.py must be listed, and
    every node with a main.py must have its console script."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in (("tensor_codec", "tensor_codec"), ("nodes", "tensor_codec_nodes")):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *parts)))
    assert found - listed == set(), "add to [tool.setuptools] packages"
    scripts = project["project"]["scripts"]
    for main in (ROOT / "nodes").glob("*/main.py"):
        target = f"tensor_codec_nodes.{main.parent.name}.main:main"
        assert target in scripts.values(), f"no console script runs {target}"
