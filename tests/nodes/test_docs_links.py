"""Every relative link of the README and the docs pages resolves: the file exists and, for an
`#anchor`, the target page has that heading. The README sends a newcomer onward to docs/ (issue
35 moved most of its text there), so a page renamed or a heading reworded must not leave a link
going nowhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", re.S | re.M)  # a code block's brackets are not links


def prose(path: Path) -> str:
    return FENCED.sub("", path.read_text())


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path: Path) -> set[str]:
    return {anchor(h) for h in re.findall(r"^#+ (.*)$", prose(path), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...: not this repository's
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in headings(dest):
            broken.append(f"{target}: {dest.name} has no heading with that anchor")
    assert not broken, broken


def test_the_anchors_are_githubs():
    """The slug rule above, on headings of this repository's kinds (code, apostrophes, commas)."""
    assert anchor("Look at it in rerun (`tc-rerun-sink`)") == "look-at-it-in-rerun-tc-rerun-sink"
    assert anchor("The JPEG engines' packages") == "the-jpeg-engines-packages"
    assert anchor("PATH, and uv") == "path-and-uv"
    assert anchor("7a. Limits: what one message may cost a reader") == "7a-limits-what-one-message-may-cost-a-reader"
