"""The codec's module-level state has one list, docs/repository.md's "Module-level state", held by
the code: every module- or class-level dict, list or set (a display, a comprehension, or a call of
a container class, the codec's own subclasses of one included) and every functools cache in
`tensor_codec/` is listed there, as a store (mutable state, at most `MAX_STORES`), a constant
table (built at import, never written) or a functools cache; nothing listed is gone; no state is
keyed by a node's id() (id() can be reused once the node is gone)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tensor_codec"
DOC = ROOT / "docs" / "repository.md"
SECTION = "## Module-level state"
MAX_STORES = 10
GROUPS = ("store", "constant", "functools cache")

CONTAINERS = {
    "dict",
    "list",
    "set",
    "bytearray",
    "OrderedDict",
    "defaultdict",
    "deque",
    "Counter",
    "ChainMap",
    "WeakKeyDictionary",
    "WeakValueDictionary",
    "WeakSet",
}
DISPLAYS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
CACHES = {"cache", "lru_cache"}  # functools'
# What writes a container in place (a constant table calls none of them).
MUTATORS = {
    "append",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "clear",
    "update",
    "setdefault",
    "add",
    "discard",
    "move_to_end",
    "appendleft",
    "extendleft",
    "sort",
    "reverse",
    "difference_update",
    "intersection_update",
    "symmetric_difference_update",
}


def _name(node: ast.AST) -> str | None:
    """`f` of ``f(...)``, ``m.f(...)`` and ``@m.f(...)``."""
    if isinstance(node, ast.Call):
        node = node.func
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)


def _modules() -> dict[str, ast.Module]:
    return {p.relative_to(PACKAGE).as_posix(): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def _container_classes(modules: dict[str, ast.Module]) -> set[str]:
    """The container names, and the codec's classes that derive from one (received._Bounded)."""
    found = set(CONTAINERS)
    classes = [n for tree in modules.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    grew = True
    while grew:
        new = {c.name for c in classes if c.name not in found and any(_name(b) in found for b in c.bases)}
        found |= new
        grew = bool(new)
    return found


def _state(modules: dict[str, ast.Module]) -> dict[tuple[str, str], tuple[int, str]]:
    """(module, name) -> (line, "container" or "functools cache") for each container bound at
    module or class level and each function with a functools cache."""
    containers = _container_classes(modules)
    found = {}

    def scan(module: str, body: list, prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                scan(module, node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(_name(d) in CACHES for d in node.decorator_list):
                    found[module, prefix + node.name] = (node.lineno, "functools cache")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                value = node.value
                if isinstance(value, DISPLAYS) or (isinstance(value, ast.Call) and _name(value) in containers):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Name) and target.id != "__all__":
                            found[module, prefix + target.id] = (node.lineno, "container")

    for module, tree in modules.items():
        scan(module, tree.body, "")
    return found


def _listed() -> dict[tuple[str, str], str]:
    """(module, name) -> group, from the doc's table."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC.name}: expected a section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| ([a-z ]+) \|", section, re.MULTILINE)
    assert rows, f"{DOC.name}, {SECTION}: expected a table of `name` | `module` | group rows"
    listed = {}
    for name, module, group in rows:
        assert group in GROUPS, f"{DOC.name}, {SECTION}: {name}: expected a group among {GROUPS}, got {group!r}"
        listed[module, name] = group
    return listed


def _writes(tree: ast.Module, name: str) -> list[int]:
    """Lines of `tree` that write `name` (a module-level name, or a class attribute by its last
    part) in place or bind it again from a function."""
    last = name.rsplit(".", 1)[-1]

    def names_it(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr == last
        return isinstance(node, ast.Name) and node.id == name

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) and names_it(node.value):
            lines.append(node.lineno)
        elif isinstance(node, ast.AugAssign) and names_it(node.target):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            if names_it(node.func.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.Global) and name in node.names:
            lines.append(node.lineno)
    return lines


def test_every_module_level_container_and_functools_cache_is_listed_in_the_doc():
    found, listed = _state(_modules()), _listed()
    problems = []
    for (module, name), (line, what) in sorted(found.items()):
        group = listed.get((module, name))
        if group is None:
            problems.append(f"tensor_codec/{module}:{line}: {name}: a module-level {what} not listed")
        elif (what == "functools cache") != (group == "functools cache"):
            problems.append(f"tensor_codec/{module}:{line}: {name}: a {what}, listed as a {group}")
    for module, name in sorted(listed.keys() - found.keys()):
        problems.append(f"tensor_codec/{module}: {name}: listed, but no such container or cache is there")
    assert not problems, f"{DOC.name}, {SECTION!r}, against the code:\n" + "\n".join(problems)


def test_at_most_ten_stores_and_the_constant_tables_are_never_written():
    modules, listed = _modules(), _listed()
    stores = sorted(f"{module}: {name}" for (module, name), group in listed.items() if group == "store")
    assert len(stores) <= MAX_STORES, f"expected at most {MAX_STORES} module-level stores, got {len(stores)}: {stores}"
    written = [
        f"tensor_codec/{module}:{line}: {name}"
        for (module, name), group in sorted(listed.items())
        if group == "constant" and module in modules
        for line in _writes(modules[module], name)
    ]
    assert not written, "constant tables written after import (list them as stores):\n" + "\n".join(written)


def test_no_state_is_keyed_by_a_nodes_id():
    keyed = [
        f"tensor_codec/{module}:{node.lineno}: {ast.unparse(node)}"
        for module, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _name(node) == "id" and "node" in ast.unparse(node).lower()
    ]
    assert not keyed, "id() of a node (reused once the node is gone); key by the object instead:\n" + "\n".join(keyed)
