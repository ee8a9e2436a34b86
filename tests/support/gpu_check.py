"""make gpu-check's context for tests that run its GPU parts on a machine without one."""

from __future__ import annotations

from pathlib import Path

from tools.gpu_check.runner import Context


def cpu_context(tmp_path: Path, budget: float = 600) -> Context:
    """The check's context with its GPU parts switched on and every node put on the CPU."""
    (tmp_path / "out").mkdir()
    (tmp_path / "work").mkdir()
    ctx = Context(tmp_path / "out", tmp_path / "work", open(tmp_path / "out" / "gpu-check.log", "w"), budget)
    ctx.cuda, ctx.device = True, "cpu"
    return ctx
