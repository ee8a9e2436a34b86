"""Without the optional packages (torchcodec, nvImageCodec, rerun-sdk, matplotlib, the dora hub
nodes): every test module still collects, and the same tests (those that need a package skip,
with the reason, when they run: tests/support/optional.py), and every node still imports. Each
runs in a fresh interpreter with the import blocker of tests/support/without_optional/."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.collection import collect_afresh, collected_here
from tests.support.paths import ROOT, TESTS

BLOCKER = TESTS / "support" / "without_optional"  # its sitecustomize.py hides the packages


def blocked_env() -> dict[str, str]:
    """This environment with the blocker first on PYTHONPATH, blocking all the packages."""
    env = {k: v for k, v in os.environ.items() if k != "WITHOUT_OPTIONAL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BLOCKER), os.environ.get("PYTHONPATH")) if p)
    return env


def run_python(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a fresh interpreter collecting every test
def test_every_module_collects_the_same_tests_without_the_optional_packages(request):
    env = blocked_env()
    # The blocker is in effect in such an interpreter (else this test would prove nothing).
    probe = run_python(["-c", "import torchcodec"], env)
    assert probe.returncode != 0 and "blocked by" in probe.stderr, probe.stderr
    with_all, without = collected_here(request.session, "", lambda item: True), collect_afresh(env=env)
    assert with_all, "no tests collected"
    missing = sorted(set(with_all) - set(without))
    assert not missing and len(without) == len(with_all), f"{len(missing)} tests not collected: {missing[:20]}"


# What dora runs of each node: its main (the console script's module) and the node logic it loads.
IMPORT_NODES = """
import importlib, pkgutil
import tensor_codec_nodes
names = [m.name for m in pkgutil.walk_packages(tensor_codec_nodes.__path__, "tensor_codec_nodes.")]
entry = [n for n in names if n.rsplit(".", 1)[-1] in ("main", "node")]
assert entry, f"no node's main or node module among {names}"  # else this would pass on nothing
for name in entry:
    importlib.import_module(name)
"""


@pytest.mark.slow  # a fresh interpreter
def test_every_node_imports_without_the_optional_packages():
    """A node without an optional package starts and says why, or falls back: it never fails at
    import. (rerun_sink/views.py and jpeg_encoder/engines/torchcodec_engines.py import theirs at
    module level, and are imported only where the package imports.)"""
    proc = run_python(["-c", IMPORT_NODES], blocked_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
