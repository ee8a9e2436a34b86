"""The dtype table (tensor_codec/wire/dtypes.py) is the format's: docs/wire-format.md section 4
lists exactly its names and item sizes, and every dtype of the installed torch is either in it or
named here as outside the format, so a dtype a new torch adds is a decision, not an accident."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from tensor_codec.wire.dtypes import WIRE_DTYPES

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-format.md"

# Not in the format: quantized dtypes and sub-byte integers and bit types (docs/wire-format.md,
# section 4), and dtypes torch added after the table was last decided on.
OUTSIDE = re.compile(r"q(u)?int.*|u?int[1-7]|bits?.*")
NOT_YET = {"bcomplex32"}  # torch 2.14; the floor (2.11) lacks it


def _documented() -> dict[str, int]:
    text = DOC.read_text()
    section = text[text.index("## 4. Dtypes") : text.index("## 5.")]
    found = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`([a-z0-9_]+)`", cells[0])
        sizes = [int(s) for s in cells[1].split(",")]
        sizes = sizes * len(names) if len(sizes) == 1 else sizes
        assert len(sizes) == len(names), row
        found.update(zip(names, sizes))
    return found


def test_the_specification_lists_the_tables_dtypes_and_item_sizes():
    assert _documented() == {name: d.itemsize for name, d in WIRE_DTYPES.items()}


def test_every_dtype_of_this_torch_is_in_the_table_or_named_outside_it():
    in_table = {d.torch_dtype for d in WIRE_DTYPES.values()}
    names = {n for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}
    undecided = sorted(
        n for n in names if getattr(torch, n) not in in_table and not OUTSIDE.fullmatch(n) and n not in NOT_YET
    )
    assert undecided == [], "add each to tensor_codec/wire/dtypes.py (CONTRIBUTING.md) or to NOT_YET here"


def test_the_tables_item_sizes_are_what_this_torch_says():
    """The table fixes each item size (the wire's, not read from torch): a torch that disagreed
    would lay out bytes the receiver reads with another width."""
    present = {name: d for name, d in WIRE_DTYPES.items() if d.torch_dtype is not None}
    assert {name: d.torch_dtype.itemsize for name, d in present.items()} == {
        name: d.itemsize for name, d in present.items()
    }
