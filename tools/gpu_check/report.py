"""What `make gpu-check` found: each part with its result, time and figures, each goal with the
figure measured in this run against its target. Written as report.json (for tools) and report.md
(for people) after every part, so a run cut short still leaves what it had."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"


@dataclass
class Part:
    name: str
    status: str  # PASS, FAIL or SKIPPED
    seconds: float
    summary: str  # one line
    figures: dict = field(default_factory=dict)
    tail: str = ""  # the end of the output of a part that failed


@dataclass
class Goal:
    name: str
    target: str  # "<= 1.5", ">= 300"
    measured: float | str | None  # None: not measured in this run
    unit: str
    met: bool | None  # None: not measured
    detail: str
    source: str  # the part that measured it


class Report:
    def __init__(self, out_dir: Path, budget_s: float):
        self.out_dir = out_dir
        self.budget_s = budget_s
        self.started = time.time()
        self.environment: dict = {}
        self.cuda: bool | None = None
        self.parts: list[Part] = []
        self.goals: list[Goal] = []
        self.engines: list[dict] = []  # engines.table: the optional engines, installed, ran, why
        self.warnings: list[str] = []  # what is missing that the check expects (engines.missing_expected)

    @property
    def ok(self) -> bool:
        return all(p.status != FAIL for p in self.parts)

    def add(self, part: Part, goals: list[Goal] = ()) -> None:
        self.parts.append(part)
        self.goals.extend(goals)
        self.write()

    def device_line(self) -> str:
        env = self.environment
        versions = ", ".join(
            f"{name} {env[name]}" for name in ("torch", "torchvision", "pyarrow", "dora-rs", "python") if env.get(name)
        )
        if not self.cuda:
            return f"no CUDA device ({versions}): the GPU parts are skipped, what the CPU can check is checked"
        driver = f", driver {env['driver']}" if env.get("driver") else ""
        return f"{env.get('device', 'a CUDA device')}{driver}, CUDA {env.get('torch_cuda')} ({versions})"

    def as_json(self) -> dict:
        return {
            "ok": self.ok,
            "cuda": self.cuda,
            "device": self.device_line(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "seconds": round(time.time() - self.started, 1),
            "budget_s": self.budget_s,
            "warnings": self.warnings,
            "environment": self.environment,
            "engines": self.engines,
            "parts": [asdict(p) for p in self.parts],
            "goals": [asdict(g) for g in self.goals],
        }

    def as_markdown(self) -> str:
        data = self.as_json()
        lines = [
            f"# GPU check: {'PASS' if self.ok else 'FAIL'}",
            "",
            data["device"],
            "",
            *(f"**Warning: {_cell(w)}**\n" for w in self.warnings),
            f"Started {data['started']}, {data['seconds']:.0f} s of a {self.budget_s:.0f} s budget.",
            "",
            "| part | result | seconds | summary |",
            "| --- | --- | ---: | --- |",
        ]
        lines += [f"| {p.name} | {p.status} | {p.seconds:.1f} | {_cell(p.summary)} |" for p in self.parts]
        if not self.goals:
            lines += ["", "No goal was measured in this run (they are measured on a GPU)."]
        else:
            lines += ["", "| goal | target | measured | met |", "| --- | --- | --- | --- |"]
            for g in self.goals:
                met = "not measured" if g.met is None else ("met" if g.met else "**not met**")
                lines.append(f"| {_cell(g.name)} | {g.target} {g.unit} | {_cell(_measured(g))} | {met} |")
        if self.engines:
            lines += ["", "## Optional engines", "", "| engine | for | installed | ran | why |"]
            lines += ["| --- | --- | --- | --- | --- |"]
            lines += [
                f"| {e['engine']} | {_cell(e['purpose'])} | {_cell(e['installed'])} | {e['ran']} | {_cell(e['why'])} |"
                for e in self.engines
            ]
        if self.environment:
            lines += ["", "## Environment", ""]
            lines += [f"- {key}: {value}" for key, value in self.environment.items() if key != "optional"]
        for p in self.parts:
            if p.figures or p.tail:
                lines += ["", f"## {p.name}", ""]
                lines += [f"- {key}: {_figure(value)}" for key, value in p.figures.items()]
                if p.tail:
                    lines += ["", "```", p.tail.rstrip(), "```"]
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "report.json").write_text(json.dumps(_finite(self.as_json()), indent=1) + "\n")
        (self.out_dir / "report.md").write_text(self.as_markdown())


def _finite(value):
    """NaN and infinities (a median of nothing) as strings: strict JSON readers refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _measured(goal: Goal) -> str:
    if goal.measured is None:
        return "-"
    value = f"{goal.measured:.3g}" if isinstance(goal.measured, float) else str(goal.measured)
    return f"{value} {goal.unit} ({goal.detail})" if goal.detail else f"{value} {goal.unit}"


def _figure(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "))
    return str(value)
