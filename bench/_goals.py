"""A benchmark's goals as `make gpu-check` reads them: each the figure measured in this run
against its target, printed as a line and written with the other figures (bench/_results.py)."""

from __future__ import annotations

_OPS = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}


def goal(name: str, measured: float, op: str, target: float, unit: str, detail: str) -> dict:
    met = bool(_OPS[op](measured, target))
    return {
        "name": name,
        "measured": measured,
        "target": f"{op} {target:g}",
        "unit": unit,
        "met": met,
        "detail": detail,
    }


def print_goals(goals: list[dict]) -> None:
    for g in goals:
        print(f"  {'met    ' if g['met'] else 'NOT met'}  {g['name']} ({g['detail']})")
