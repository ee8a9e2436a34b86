"""Hooks and fixtures only (helpers are in tests/support/): the tiers' markers (`e2e` for
everything under tests/e2e/ and every `dora` test, the `gpu` skip without CUDA), the `dora_cli`
fixture, dataflow runs explained in a failing test's report, and whether the session deselected
tests (tests/support/collection.py). A test that needs a fresh dora link makes a new FakeNode:
the codec keeps what it learns of a node on that node's `Link`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support import dora as _dora
from tests.support.collection import DESELECTED

E2E = Path(__file__).resolve().parent / "e2e"


def pytest_deselected(items):
    if items:
        items[0].config.stash[DESELECTED] = True


def pytest_collection_modifyitems(config, items):
    e2e = pytest.mark.e2e
    for item in items:
        if Path(item.path).is_relative_to(E2E) or item.get_closest_marker("dora"):
            item.add_marker(e2e)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def dora_cli() -> str:
    path = _dora.dora_executable()
    if path is None:
        pytest.fail("the dora CLI is not installed (pip install dora-rs-cli); end-to-end tests need it")
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test that ran dataflows gets them explained in its report even where its own
    assertion message did not say (an exception, an assertion outside `explained()`)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call" and _dora._runs:
        shown = str(report.longrepr)
        for run in _dora._runs:
            if f"{_dora.RUN_BANNER}{run.workdir}:" not in shown:
                report.sections.append((f"dataflow run in {run.workdir}", run.explain()))


@pytest.fixture(autouse=True)
def _forget_runs():
    """Each test's failure report explains its own dataflow runs only."""
    _dora._runs.clear()
    yield
    _dora._runs.clear()
