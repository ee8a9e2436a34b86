"""The codec's own import graph, from its source: modules, import arrows, and the arrows that
point upward (from a lower layer of the package to a higher one), the figures a change to the
package's structure is judged by.

    python -m tools.import_graph                 # this tree's tensor_codec
    python -m tools.import_graph --root DIR      # another checkout's (a revision before a change)
    python -m tools.import_graph --list          # every arrow, upward ones marked

An arrow is one module importing another of the package, at module level or inside a function
(a lazy import: counted, and shown as such). `LAYERS` is the intended layering, lowest first:
a module may import its own layer and those below. tests/codec/test_import_layers.py holds the
package to it (no upward arrow, no cycle at module level, no reach into CUDA IPC from the modules
of `KEPT_FROM_CUDA_IPC`).

What an import graph cannot see, a module asking the transport table for a sibling transport at
run time (``get_transport(CUDA_IPC)``), is looked for in the modules that must not depend on CUDA
IPC (`cuda_ipc_reaches`).
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "tensor_codec"

# Lowest first. A module's layer is the first entry that names it or a package above it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("errors", ("errors",)),
    # The wire format: what a message is, and the receiver's checks of it (docs/wire-format.md).
    # (dtypes, header_json and kinds: their top-level names before issue 35, so that a checkout
    # from before is measured against the same layering.)
    ("wire", ("wire", "dtypes", "header_json", "kinds")),
    # Mechanics every path uses: process-wide limits, strides and copies, the encoder's walk.
    (
        "core",
        ("limits", "versions", "layout", "walk", "plain", "digest"),
    ),
    # An object taken apart (plan), received trees compiled, lifetimes, the helpers over a whole
    # structure (pinning, stamps, the sample suite).
    ("structure", ("plan", "tree", "received", "lifetimes", "metadata", "pinning", "testing")),
    # Which GPU is which (by UUID), for both transports and the send pipeline.
    ("gpus", ("gpus",)),
    # The transports: how bytes travel (host bytes, CUDA IPC) and the host<->GPU copies they make.
    ("transports", ("transports", "cuda_ipc")),
    # The paths one way and back (most messages back in one step: in_place), the rule that picks
    # a transport, and `describe` (a message checked as decode checks it, through its
    # transport's keys, without restoring it).
    ("paths", ("routing", "send_pipeline", "in_place", "codec", "describe")),
    # The top of the codec: dora's nodes, outputs and limits.
    ("dora", ("dora",)),
    ("api", ("__init__",)),
)


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    lazy: bool  # imported inside a function (at call time), not when the module is imported


def module_names(root: Path) -> dict[str, Path]:
    """Dotted names (without the package prefix; the package's own __init__ is '__init__') ->
    files."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root / PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom | ast.Import, known: set[str]) -> list[str]:
    """The package's modules an import statement in `module` names."""
    if isinstance(node, ast.Import):
        return [
            _strip(alias.name) for alias in node.names if alias.name.split(".")[0] == PACKAGE and _strip(alias.name)
        ]
    if node.level == 0:
        if (node.module or "").split(".")[0] != PACKAGE:
            return []
        base = _strip(node.module or "")
    else:
        here = module.split(".") if module != "__init__" else []
        package = here if is_package else here[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    targets = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}" if base else alias.name
        targets.append(candidate if candidate in known else (base or "__init__"))
    return targets


def _strip(dotted: str) -> str:
    return dotted[len(PACKAGE) + 1 :] if dotted.startswith(PACKAGE + ".") else ""


def arrows(root: Path) -> tuple[dict[str, Path], list[Arrow]]:
    modules = module_names(root)
    known = set(modules)
    found: dict[tuple[str, str], bool] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            lazy = id(node) not in top_level and not _under_type_checking(tree, node)
            if _under_type_checking(tree, node):
                continue  # for the type checker only: no arrow at run time
            for target in _resolve(name, path.name == "__init__.py", node, known):
                if target and target != name and target in known:
                    key = (name, target)
                    found[key] = found.get(key, True) and lazy
    return modules, [Arrow(s, t, lazy) for (s, t), lazy in sorted(found.items())]


def _under_type_checking(tree: ast.Module, target: ast.AST) -> bool:
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            if any(child is target for child in ast.walk(node)):
                return True
    return False


def layer_of(module: str) -> int:
    """The index in LAYERS of `module` (a dotted name without the package prefix)."""
    parts = module.split(".")
    for index, (_, members) in enumerate(LAYERS):
        for depth in range(len(parts), 0, -1):
            if ".".join(parts[:depth]) in members:
                return index
    raise KeyError(f"{PACKAGE}.{module}: in no layer of tools/import_graph.py's LAYERS")


def upward(arrow: Arrow) -> bool:
    return layer_of(arrow.target) > layer_of(arrow.source)


def cycles(edges: list[Arrow]) -> list[list[str]]:
    """Strongly connected groups of more than one module among module-level arrows (a lazy
    import breaks a cycle at import time, so it is left out)."""
    graph: dict[str, list[str]] = {}
    for a in edges:
        if not a.lazy:
            graph.setdefault(a.source, []).append(a.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graph is small: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return groups


# Modules that must not depend on the CUDA IPC transport: the host transport, and the send
# pipeline, which hands a message to whichever transport routing picked. Which GPU is which is
# gpus.py's.
KEPT_FROM_CUDA_IPC = ("transports.host", "send_pipeline")
CUDA_IPC_NAMES = frozenset({"CUDA_IPC", "cuda-ipc"})  # names.py's constant, and its text


def cuda_ipc_reaches(root: Path) -> list[str]:
    """Where a module of KEPT_FROM_CUDA_IPC reaches CUDA IPC: it imports the cuda_ipc package
    (at module level, inside a function, or for the type checker: a cast of what the transport
    table gives follows), or it asks the transport table for it by name (a call whose arguments
    name ``CUDA_IPC`` or ``"cuda-ipc"``: ``get_transport(CUDA_IPC)``). A module this checkout
    lacks is skipped."""
    modules = module_names(root)
    known = set(modules)
    found = []
    for name in KEPT_FROM_CUDA_IPC:
        path = modules.get(name)
        if path is None:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = _resolve(name, path.name == "__init__.py", node, known)
                if any(t.split(".")[0] == "cuda_ipc" for t in targets):
                    found.append(f"{name}:{node.lineno}: imports {ast.unparse(node)!r}")
            elif isinstance(node, ast.Call) and _names_cuda_ipc(node):
                found.append(f"{name}:{node.lineno}: asks for the CUDA IPC transport: {ast.unparse(node)}")
    return found


def _names_cuda_ipc(call: ast.Call) -> bool:
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(arg, ast.Name) and arg.id in CUDA_IPC_NAMES:
            return True
        if isinstance(arg, ast.Attribute) and arg.attr in CUDA_IPC_NAMES:
            return True
        if isinstance(arg, ast.Constant) and arg.value in CUDA_IPC_NAMES:
            return True
    return False


def summary(root: Path) -> dict:
    modules, edges = arrows(root)
    up = [a for a in edges if upward(a)]
    lines = {name: len(path.read_text().splitlines()) for name, path in modules.items()}
    return {
        "modules": len(modules),
        "lines": sum(lines.values()),
        "arrows": len(edges),
        "lazy_arrows": sum(a.lazy for a in edges),
        "upward_arrows": len(up),
        "upward": [f"{a.source} -> {a.target}{' (lazy)' if a.lazy else ''}" for a in up],
        "cycles": cycles(edges),
        "cuda_ipc_reaches": cuda_ipc_reaches(root),
        "largest": sorted(lines.items(), key=lambda kv: -kv[1])[:5],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.import_graph", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="a checkout")
    parser.add_argument("--list", action="store_true", help="print every arrow")
    args = parser.parse_args(argv)
    if not (args.root / PACKAGE).is_dir():
        print(f"import_graph: {args.root}: no {PACKAGE}/ there", file=sys.stderr)
        return 2
    s = summary(args.root)
    print(
        f"{PACKAGE} at {args.root}: {s['modules']} modules, {s['lines']} lines, {s['arrows']} import arrows "
        f"({s['lazy_arrows']} lazy), {s['upward_arrows']} upward, {len(s['cycles'])} cycles, "
        f"{len(s['cuda_ipc_reaches'])} reaches into CUDA IPC from {', '.join(KEPT_FROM_CUDA_IPC)}"
    )
    for line in s["upward"]:
        print(f"  upward: {line}")
    for group in s["cycles"]:
        print(f"  cycle: {' <-> '.join(group)}")
    for line in s["cuda_ipc_reaches"]:
        print(f"  reaches CUDA IPC: {line}")
    if args.list:
        for a in arrows(args.root)[1]:
            mark = " UPWARD" if upward(a) else ""
            print(f"  {a.source} -> {a.target}{' (lazy)' if a.lazy else ''}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
