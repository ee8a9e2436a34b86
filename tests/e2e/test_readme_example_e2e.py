"""The README's first dataflow, as a reader copies it: detector.py and my-flow.yml taken from the
README's code blocks and run with `dora run`. What the README says it prints, it prints: every
box carried, stamped and verified `good`."""

from __future__ import annotations

import re

import pytest

from tests.support.dora import ROOT, run_dora, tail

pytestmark = pytest.mark.dora


def code_block(first_line: str) -> str:
    """The README's fenced code block whose first line is `first_line`."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"```\w*\n(" + re.escape(first_line) + r"\n.*?)```", text, re.S)
    assert found, f"README.md has no code block starting with {first_line!r}"
    return found.group(1)


def test_the_readmes_node_of_your_own_runs_as_written_and_every_box_is_good(dora_cli, tmp_path):
    (tmp_path / "detector.py").write_text(code_block("# detector.py: receives frames, sends boxes"))
    flow = tmp_path / "my-flow.yml"
    flow.write_text(code_block("# my-flow.yml"))
    run = run_dora([dora_cli, "run", str(flow)], flow, timeout=180, reports={}, receivers=())
    assert run.returncode == 0, tail(run)
    promised = code_block("tensor receiver summary: PASS (restored on cpu, verify=full)")
    assert promised.splitlines()[0] in run.stdout, tail(run)
    row = re.search(r"boxes\s+(\d+)/(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", run.stdout)
    assert row, tail(run)
    received, expected, good, unverified, bad = map(int, row.groups())
    assert (received, expected, good, unverified, bad) == (60, 60, 60, 0, 0), row.group(0)
    latency = re.search(r"boxes\s+60/60.*?\s(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s*$", run.stdout, re.M)
    assert latency, "the receiver timed the boxes from their sent_ns: " + row.group(0)
