"""The package never deserializes code or objects, and never touches CUDA unless asked."""

from __future__ import annotations

import ast
import json
import os
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
def test_import_loads_no_transport_and_a_host_round_trip_never_initializes_cuda():
    code = (
        "import importlib.util, json, sys, torch, tensor_codec as tc\n"
        "from tensor_codec import transports\n"
        "modules = [importlib.util.resolve_name(t.partition(':')[0], 'tensor_codec.transports')"
        " for t in transports._TABLE.values()]\n"
        "loaded_at_import = sorted(m for m in modules if m in sys.modules)\n"
        "v, m = tc.encode({'x': torch.ones(3)}); tc.decode(v, m)\n"
        "print(json.dumps({'transports_at_import': loaded_at_import,"
        " 'cuda_initialized': torch.cuda.is_initialized()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"transports_at_import": [], "cuda_initialized": False}  # every transport, loaded on first use


def test_every_transport_of_the_table_loads_and_answers_to_its_name():
    """What a message header's transport can select (transports._TABLE): each entry's module loads,
    and its class has the Transport interface under the name it is registered by."""
    from tensor_codec import transports
    from tensor_codec.transports.base import Transport

    assert tuple(transports._TABLE) == transports.NAMES
    for name in transports.NAMES:
        transport = transports.transport_for_message(name)
        assert transport.name == name
        assert type(transport.leaf_keys) is frozenset and type(transport.header_keys) is frozenset
        missing = [m for m in Transport.__dict__ if not m.startswith("_") and not callable(getattr(transport, m, None))]
        assert missing == [], f"{name}: {missing}"


@pytest.mark.slow  # fresh interpreters
def test_torchvision_is_imported_on_the_first_tvtensor_not_with_the_package(tmp_path):
    """Importing torchvision costs a process ~1.3 s of CPU: a node of plain tensors never pays it.
    A TVTensor's header decodes in a process that had not imported torchvision (its kinds join on
    first sight), and where torchvision cannot be imported it is refused by name."""
    from tensor_codec.testing import make_tvtensor_cases

    case = make_tvtensor_cases()["image"]
    import tensor_codec as tc

    value, metadata = tc.encode({"img": case})
    # The message goes to the child as bytes and its metadata as JSON (no pickle: a file each).
    (tmp_path / "value.bin").write_bytes(value.buffers()[1].to_pybytes()[: len(value)])
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))
    decode_it = (
        "import json, pyarrow as pa, tensor_codec as tc, sys, torch\n"
        f"raw = open({str(tmp_path / 'value.bin')!r}, 'rb').read()\n"
        f"metadata = json.load(open({str(tmp_path / 'metadata.json')!r}))\n"
        "seen = {'import': 'torchvision' in sys.modules}\n"
        "tc.decode(*tc.encode({'x': torch.ones(3)}))\n"
        "seen['plain tensors'] = 'torchvision' in sys.modules\n"
        "try:\n"
        "    got = type(tc.decode(pa.array(list(raw), pa.uint8()), metadata)['img']).__name__\n"
        "except Exception as e:\n"
        "    got = f'{type(e).__name__}: {e}'\n"
        "seen['tvtensor'] = 'torchvision' in sys.modules\n"
        "print(json.dumps({'seen': seen, 'got': got}))\n"
    )
    # The suite's import blocker (tests/support/without_optional), asked to block torchvision only.
    blocker = ROOT / "tests" / "support" / "without_optional"
    without = {
        **os.environ,
        "WITHOUT_OPTIONAL": "torchvision",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")])),
    }
    results = {}
    for label, env in (
        ("here", None),
        ("without torchvision", without),
    ):
        out = subprocess.run(
            [sys.executable, "-c", decode_it], capture_output=True, text=True, check=True, cwd=ROOT, env=env
        )
        results[label] = json.loads(out.stdout.strip().splitlines()[-1])
    assert results["here"] == {
        "seen": {"import": False, "plain tensors": False, "tvtensor": True},
        "got": "Image",
    }
    assert results["without torchvision"] == {
        "seen": {"import": False, "plain tensors": False, "tvtensor": False},
        "got": "DecodeError: tc.header.tree.items[0][1].t: 'tv.Image' needs a torchvision that provides it; "
        "this process has none",
    }


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


TESTS = ROOT / "tests"


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of everything a module imports, `from x import y` as both x and x.y."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.append((node.lineno, base))
            found += [
                (node.lineno, f"{base.rstrip('.')}.{a.name}" if base.strip(".") else base + a.name) for a in node.names
            ]
    return found


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_test_module_imports_another_test_module_or_conftest(path):
    """Helpers shared by tests live in tests/support/ (imported as tests.support.<module>); a test
    module or conftest.py imported elsewhere runs its tests' import side effects twice and ties
    the two files together."""
    for line, name in _imported_modules(ast.parse(path.read_text(), filename=str(path))):
        parts = [p for p in name.split(".") if p]
        assert not any(p.startswith("test_") or p == "conftest" for p in parts), (
            f"{path}:{line} imports {name}: put what it shares in tests/support/"
        )


def _fresh_process_snippets(tree: ast.AST):
    """(line, code) of every string literal a test hands to a helper whose name says it runs the
    code in a fresh interpreter (`in_a_fresh_process(\"\"\"...\"\"\")`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and "fresh_process" in node.func.id:
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    yield node.lineno, arg.value


def test_code_a_test_runs_in_a_fresh_interpreter_is_valid_python():
    """Such code is a string until it runs, and the tests that run it are mostly gpu tests: a
    syntax error in one (issue 37: a misindented import) would otherwise first show on a GPU host,
    costing a device call. Compiled here, on every machine (compiled, never run)."""
    import textwrap

    broken, checked = [], 0
    for path in sorted(TESTS.rglob("test_*.py")):
        for line, code in _fresh_process_snippets(ast.parse(path.read_text(), filename=str(path))):
            checked += 1
            try:
                ast.parse(textwrap.dedent(code), filename=f"{path}:{line}")
            except SyntaxError as e:
                broken.append(f"{path.relative_to(ROOT)}:{line}: {e}")
    assert checked > 0, "no code run in a fresh interpreter was found: the helper's name changed?"
    assert not broken, "code run in a fresh interpreter does not parse:\n" + "\n".join(broken)
