"""A pytest plugin for the gpu tests on xdist workers (`-n N --dist loadfile -p
tools.gpu_check.groups`, as engines.workers decides): xdist's `loadfile` scheduling, each test
file's tests on one worker, except that every dataflow test (tests/e2e/: each starts dora
daemons and nodes and times its messages, and two at once on one machine disturb each other)
is one unit, run by one worker one after another.

Through xdist's own hook for a scheduler (pytest_xdist_make_scheduler), on test ids alone: the
xdist process that hands out the tests does not collect them, so it sees no marks. Every gpu test
that runs a dataflow is under tests/e2e/ (tests/e2e/test_gpu_check_e2e.py checks it). xdist's
`--dist loadgroup` would read marks, but it renames the tests to do so (`id@group`), which
pytest 9.2 no longer lets it do.
"""

from __future__ import annotations

import pytest

DATAFLOW = "dataflow"
DATAFLOW_DIR = "tests/e2e/"


def scope_of(nodeid: str) -> str:
    """The unit of work a test id belongs to: DATAFLOW, or its file."""
    path = nodeid.split("::", 1)[0]
    return DATAFLOW if path.startswith(DATAFLOW_DIR) else path


@pytest.hookimpl(optionalhook=True)  # the hook is xdist's: only with xdist installed
def pytest_xdist_make_scheduler(config, log):
    try:
        from xdist.scheduler import LoadFileScheduling
    except ImportError:  # where xdist's package does not name it
        from xdist.scheduler.loadfile import LoadFileScheduling

    class DataflowsApart(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return DataflowsApart(config, log)
