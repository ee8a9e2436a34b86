"""The codec's layering (tools/import_graph.py's LAYERS), held by its own imports: the wire format
rests only on errors, nothing imports a layer above its own, no module-level cycle."""

from __future__ import annotations

import ast
from pathlib import Path

from tools import import_graph

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_has_a_layer():
    for name in import_graph.module_names(ROOT):
        import_graph.layer_of(name)  # raises, naming the module, for one in no layer


def test_no_import_points_upward_and_none_makes_a_cycle():
    found = import_graph.summary(ROOT)
    assert found["upward"] == []
    assert found["cycles"] == []


def test_the_host_transport_and_the_send_pipeline_never_reach_cuda_ipc():
    """Which GPU a UUID names is gpus.py's: neither imports the CUDA IPC package nor asks the
    transport table for it (an arrow no import graph shows)."""
    assert import_graph.cuda_ipc_reaches(ROOT) == []


def test_gpus_lies_below_the_transports_and_dora_above_the_paths():
    layer = import_graph.layer_of
    assert layer("plan") < layer("gpus") < layer("transports.host")
    assert layer("gpus") < layer("cuda_ipc.transport")
    assert max(layer(m) for m in ("codec", "send_pipeline", "routing", "transports")) < layer("dora.output")


def test_the_wire_format_rests_only_on_errors():
    _, arrows = import_graph.arrows(ROOT)
    from_wire = {a.target for a in arrows if a.source.split(".")[0] == "wire"}
    assert {t for t in from_wire if t.split(".")[0] != "wire"} == {"errors"}


def test_the_packages_init_only_re_exports():
    """tensor_codec/__init__.py is the package's face: its imports, every one at the top, then the
    version check, __version__ and __all__; nothing defined there (the ipc_* functions live with
    CUDA IPC, and are the same objects under tc.)."""
    import tensor_codec as tc
    from tensor_codec import cuda_ipc

    tree = ast.parse((ROOT / "tensor_codec" / "__init__.py").read_text())
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    imports = [isinstance(n, ast.Import | ast.ImportFrom) for n in body]
    rest = [ast.unparse(n).partition(" = ")[0] for n in body[imports.count(True) :]]
    assert all(imports[: imports.count(True)]) and rest == ["_versions.require()", "__version__", "__all__"]
    for name in ("ipc_configure", "ipc_flush", "ipc_stats", "ipc_trim"):
        assert getattr(tc, name) is getattr(cuda_ipc, name) and name in tc.__all__


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "tensor_codec" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_tool_finds_an_upward_import_a_lazy_one_and_a_cycle(tmp_path):
    """What the checks above rely on: an import from the wire package up into the codec (at
    module level and inside a function) is upward, a TYPE_CHECKING one is no arrow, and two
    modules importing each other (through wire.header too) make a cycle."""
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "",
            "wire/__init__.py": "",
            "wire/header.py": (
                "from typing import TYPE_CHECKING\n"
                "from ..errors import X\n"
                "from ..codec import encode\n"
                "if TYPE_CHECKING:\n    from ..plan import Plan\n"
                "def f():\n    from .. import routing\n"
            ),
            "codec.py": "from .wire import header\nfrom . import routing\n",
            "routing.py": "from . import codec\n",
            "plan.py": "",
        },
    )
    found = import_graph.summary(root)
    assert sorted(found["upward"]) == ["wire.header -> codec", "wire.header -> routing (lazy)"]
    assert found["cycles"] == [["codec", "routing", "wire.header"]]  # one group: each reaches the others
    assert ("wire.header", "plan") not in {(a.source, a.target) for a in import_graph.arrows(root)[1]}


def test_the_tool_finds_a_reach_into_cuda_ipc_from_the_modules_kept_from_it(tmp_path):
    """An import of the cuda_ipc package (lazy, or for the type checker) and a call naming the
    CUDA IPC transport, in the host transport or the send pipeline, are reaches; handing a message
    to a transport named by a variable is not, nor is the same code in another module."""
    asks = "def f():\n    return get_transport(CUDA_IPC)\n"
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "cuda_ipc/__init__.py": "",
            "cuda_ipc/transport.py": "",
            "transports/__init__.py": "",
            "transports/host.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..cuda_ipc.transport import T\n" + asks
            ),
            "send_pipeline.py": (
                "def g(name):\n    from .cuda_ipc import transport\n    return get_transport(name)\n"
                "def h():\n    return get_transport('cuda-ipc')\n"
            ),
            "codec.py": asks,
        },
    )
    found = [line.split(": ")[0] for line in import_graph.cuda_ipc_reaches(root)]
    assert sorted(found) == ["send_pipeline:2", "send_pipeline:5", "transports.host:3", "transports.host:5"]
