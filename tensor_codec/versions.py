"""The torch, torchvision and pyarrow releases this package supports (docs/install.md,
"Supported releases"), checked when it is imported: pip enforces them on a normal install, but an
interpreter that came with torch (a container, a GPU host, ``make install PYTHON=...``) is used as
it is. The floors are the oldest releases read and tested against (the GPU hosts carry torch 2.11
and torchvision 0.26), pyproject.toml's own (a test keeps the two in step).

This module imports nothing heavy: the installer (tools/install_env.py) loads it by path to
apply the same rule before anything is installed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["MINIMUM", "release", "problems", "require"]

# distribution name -> oldest supported release
MINIMUM: Mapping[str, tuple[int, ...]] = MappingProxyType(
    {
        "torch": (2, 11),
        "torchvision": (0, 26),
        # 16: pyarrow 15's wheels need numpy < 2, and the project needs numpy >= 2 (pyproject.toml).
        "pyarrow": (16,),
    }
)


def release(version: str) -> tuple[int, ...] | None:
    """``"2.11.0a0+cu130"`` -> ``(2, 11, 0)``; None when `version` does not start with a number."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(version))
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def _pad(numbers: tuple[int, ...], width: int) -> tuple[int, ...]:
    return numbers + (0,) * (width - len(numbers))


def problems(found: dict[str, str | None]) -> list[str]:
    """One line per package of `found` (name -> version, None = not installed) that is missing or
    older than MINIMUM; names MINIMUM does not list are ignored."""
    out = []
    for name, version in found.items():
        floor = MINIMUM.get(name)
        if floor is None:
            continue
        numbers = None if version is None else release(version)
        width = max(len(floor), len(numbers or ()))
        if numbers is None or _pad(numbers, width) < _pad(floor, width):
            got = "none installed" if version is None else f"{name} {version}"
            out.append(f"{name}: expected {name} >= {'.'.join(map(str, floor))}, found {got}")
    return out


def require() -> None:
    """Raise ImportError naming every supported package that is too old (called on import): torch
    by its own ``__version__`` (imported by then), the others by their installed metadata.
    torchvision may be absent (kinds.py then knows plain tensors only)."""
    import contextlib
    from importlib import metadata

    import torch

    found: dict[str, str | None] = {"torch": torch.__version__, "pyarrow": None}  # None: not installed
    for name in ("pyarrow", "torchvision"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    bad = problems(found)
    if bad:
        raise ImportError(
            "tensor_codec cannot run with this environment:\n  "
            + "\n  ".join(bad)
            + "\nUpgrade those packages, or run `make install` without PYTHON= to get the pinned releases in .venv."
        )
