"""What the README and examples/README.md say that the code decides: checked against the code, so
a figure or a list cannot go stale without a test failing."""

from __future__ import annotations

import re

from tensor_codec.dora.limits import CAP_PAYLOAD, DAEMON_PATH_MAX_PAYLOAD
from tests.support.dora import ROOT

README = (ROOT / "README.md").read_text()
EXAMPLES = ROOT / "examples"


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def test_the_readmes_dora_limits_are_the_ones_the_code_enforces_and_errors_name():
    """A newcomer read one figure in the README and another in the error (`_mib`, tensor_codec/dora/limits.py)."""
    daemon = re.search(r"which carries at most about (\d+\.\d) MiB", README)
    ceiling = re.search(r"No message passes (\d+\.\d) MiB", README)
    assert daemon and ceiling
    assert f"{daemon.group(1)} MiB" == mib(DAEMON_PATH_MAX_PAYLOAD) and f"{ceiling.group(1)} MiB" == mib(CAP_PAYLOAD)
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for figure in re.findall(r"(5[6-9]\.\d) MiB", path.read_text()):
            assert f"{figure} MiB" == mib(DAEMON_PATH_MAX_PAYLOAD), f"{path.name}: {figure} MiB"


def test_the_readme_quotes_what_dora_says_when_a_node_is_not_on_path():
    """dora 1.1 names the missing path ("Could not find source path `tc-...`"); the README said "no reason"."""
    path_note = README[README.index("**PATH.**") :].split("\n\n")[0]
    assert "no reason" not in path_note and "Could not find source path" in path_note


def test_examples_readme_lists_every_example_and_the_test_that_runs_it():
    text = (EXAMPLES / "README.md").read_text()
    rows = dict(re.findall(r"^\| \[([\w.-]+\.yml)\]\(\1\) \|.*`(tests/e2e/[\w/]+\.py)` \|$", text, re.M))
    assert set(rows) == {p.name for p in EXAMPLES.glob("*.yml")}
    for example, test in rows.items():
        assert example in (ROOT / test).read_text(), f"{test} does not run {example}"


def test_the_readmes_node_table_lists_every_registered_node():
    """A node added by its registration (CONTRIBUTING.md, "Add a node") shows in the README's
    table, with a link to its manifest."""
    from tensor_codec_nodes.common.registry import node_scripts

    readme = (ROOT / "README.md").read_text()
    row = re.compile(r"^\| `(tc-[a-z-]+)` \|.*\]\((nodes/[^)]+)\) \|$", re.M)
    rows = {m.group(1): m.group(2) for m in row.finditer(readme)}
    assert {script: f"nodes/{package}/dora-node.yml" for package, script in node_scripts().items()} == rows
