"""What `make gpu-check` runs with besides torch: the optional engines (TorchCodec, nvImageCodec,
torchvision's CUDA codecs, rerun-sdk) and pytest-xdist. Which are installed, which the gpu tests
ran and, for each that did not run, why: the report's engines table.

TorchCodec is expected: it is the JPEG nodes' default engine and ../shared/gpu/wheels.sh carries
it to the lent GPU hosts by default. Where it is missing the report says so at its top (the
JPEG GPU tests on it skip), and the check goes on: nothing else needs it.

The gpu tests run on pytest-xdist workers where the interpreter has it: `workers` decides how
many from the CPUs (a caller's PYTEST_ADDOPTS naming xdist's options wins), each test file's
tests on one worker (`--dist loadfile`), and groups.py's scheduler keeps the dataflow tests
together, on one worker one after another (each starts dora daemons and times its messages).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass

EXPECTED_FROM = "../shared/gpu/wheels.sh carries torchcodec 0.16.0, for torch 2.11, to the GPU hosts"
MAX_WORKERS = 6  # one GPU shared by every worker: 6 ran the gpu tests clean on a 16-core H100 host
CPUS_PER_WORKER = 2  # a worker's test process and the dora daemon, nodes or encoder threads it starts
GROUPS_PLUGIN = "tools.gpu_check.groups"
XDIST_OPTIONS = ("-n", "--numprocesses", "--maxprocesses", "--dist", "--tx", "--max-worker-restart")  # with a value
XDIST_FLAGS = ("-d", "--distload")


@dataclass(frozen=True)
class Case:
    """One test of gpu-tests.xml."""

    module: str  # junit classname: tests.nodes.test_jpeg_gpu
    name: str  # test_x[cuda-torchcodec], without xdist's @group suffix
    outcome: str  # passed, failed or skipped
    message: str = ""  # why it skipped or failed (first line)


@dataclass(frozen=True)
class Workers:
    """How the gpu tests are spread: pytest's extra arguments and the line the report shows."""

    args: tuple[str, ...]
    count: int  # workers; 0: one process; -1: as many as the caller's PYTEST_ADDOPTS says
    note: str

    @property
    def used(self) -> bool:
        return self.count != 0


def cpu_count() -> int:
    """The CPUs this process may run on (a container's or taskset's limit, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def workers(addopts: str | None, cpus: int, have_xdist: bool) -> Workers:
    """How many xdist workers the gpu tests get, and pytest's arguments for it. The caller's
    PYTEST_ADDOPTS wins where it names an xdist option (-n, --dist, -p no:xdist...); with 2 CPUs
    or fewer, or without pytest-xdist, one process (workers would only add their start-up)."""
    try:
        words = shlex.split(addopts or "")
    except ValueError:
        words = (addopts or "").split()
    named = _xdist_words(words)
    if named:
        starts = _caller_starts_workers(words)
        return Workers(
            (),
            -1 if starts else 0,
            f"PYTEST_ADDOPTS from the caller: {' '.join(named)}{'' if starts else ' (one process)'}",
        )
    if not have_xdist:
        return Workers((), 0, "pytest-xdist is not installed: the gpu tests run in one process")
    count = min(MAX_WORKERS, cpus // CPUS_PER_WORKER)
    if count < 2:
        return Workers((), 0, f"{cpus} CPU{'s' if cpus != 1 else ''}: the gpu tests run in one process")
    return Workers(
        ("-n", str(count), "--dist", "loadfile", "-p", GROUPS_PLUGIN),
        count,
        f"{count} workers for {cpus} CPUs, --dist loadfile with the dataflow tests as one file (on one worker)",
    )


def _xdist_words(words: list[str]) -> list[str]:
    """The xdist options among PYTEST_ADDOPTS' words, with their values."""
    named = []
    for i, word in enumerate(words):
        option = word.split("=", 1)[0]
        if option in XDIST_OPTIONS:
            named += [word] if "=" in word or i + 1 >= len(words) else [word, words[i + 1]]
        elif word in XDIST_FLAGS:
            named.append(word)
        elif re.fullmatch(r"-n\S+", word):  # -n6, -nauto
            named.append(word)
        elif word in ("no:xdist", "-pno:xdist") or (word == "-p" and i + 1 < len(words) and words[i + 1] == "no:xdist"):
            named.append("-p no:xdist")
    return list(dict.fromkeys(named))


def _caller_starts_workers(words: list[str]) -> bool:
    """Whether the caller's options start workers: -n with anything but 0, and xdist not off."""
    if "no:xdist" in words or "-pno:xdist" in words:
        return False
    value = None
    for i, word in enumerate(words):
        if word in ("-n", "--numprocesses") and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith("--numprocesses="):
            value = word.split("=", 1)[1]
        elif re.fullmatch(r"-n\S+", word):
            value = word[2:]
    return value not in (None, "0")


# ------------------------------------------------------------------------------ the engines table
def _param_words(case: Case) -> set[str]:
    """The words of a test's parameter id: test_x[cuda-torchcodec] -> {cuda, torchcodec}."""
    match = re.search(r"\[(.*)\]$", case.name)
    return set(match.group(1).split("-")) if match else set()


TORCHVISION_CUDA_TESTS = (  # tests/nodes/test_jpeg_gpu.py's tests of torchvision's CUDA encoder itself
    "test_after_the_engine_starts_an_encode_from_any_stream_fences_the_default_stream",
    "test_an_encoder_built_earlier_on_another_stream_is_detected_and_encodes_stay_correct",
)


@dataclass(frozen=True)
class Engine:
    name: str  # as the report names it
    key: str  # its entry in the environment probe's "optional"
    purpose: str
    tests: Callable[[Case], bool] | None  # which gpu tests run it (None: not a test's engine)
    expected: bool = False


ENGINES = (
    Engine(
        "torchcodec",
        "torchcodec",
        "the JPEG nodes' default engine (CPU and nvJPEG)",
        lambda c: "torchcodec" in _param_words(c),
        expected=True,
    ),
    Engine(
        "nvImageCodec",
        "nvimgcodec",
        "the JPEG nodes' NVIDIA engine (the nvimgcodec extra)",
        lambda c: "nvimgcodec" in _param_words(c),
    ),
    Engine(
        "torchvision CUDA codecs",
        "torchvision",
        "torchvision.io's nvJPEG encode and decode (the fallback engine)",
        lambda c: "torchvision" in _param_words(c) or c.name in TORCHVISION_CUDA_TESTS,
    ),
    Engine("rerun-sdk", "rerun", "the tc-rerun-sink node", lambda c: c.module.rsplit(".", 1)[-1] == "test_rerun_sink"),
    Engine("pytest-xdist", "xdist", "the gpu tests on several workers", None),
)


def expected_but_missing(optional: dict) -> list[Engine]:
    """The expected engines that are not installed here, or do not load (`optional`: the
    environment probe's)."""
    found = {engine.key: optional.get(engine.key) or {} for engine in ENGINES}
    return [e for e in ENGINES if e.expected and (not found[e.key].get("version") or found[e.key].get("unavailable"))]


def missing_expected(optional: dict) -> list[str]:
    """One line for each expected engine that is not usable here (the report's warnings)."""
    return [
        f"{engine.name} is missing, and expected ({EXPECTED_FROM}): "
        f"{(optional.get(engine.key) or {}).get('unavailable') or 'not installed'}. The JPEG GPU tests on it skip, "
        "ENGINE=auto falls back"
        for engine in expected_but_missing(optional)
    ]


def table(optional: dict, cuda: bool, cases: list[Case] | None, workers_: Workers | None) -> list[dict]:
    """The report's engines table: for each of ENGINES, what is installed, whether the gpu tests
    ran it (yes/no) and why not, or what ran. `optional`: the environment probe's (per key: its
    version, None where not installed, and why it is unusable, None where usable); `cases`: the
    gpu tests' results (None: they did not run); `workers_`: the xdist decision (None: not made)."""
    rows = []
    missing = expected_but_missing(optional)
    for engine in ENGINES:
        found = optional.get(engine.key) or {}
        version, unusable = found.get("version"), found.get("unavailable")
        installed = version or "missing"
        if version and unusable:
            installed += " (does not load)"
        if engine.tests is None:
            ran, why = _xdist_row(cuda, cases, workers_)
        else:
            ran, why = _engine_row(engine, cuda, cases, version, unusable)
        if engine in missing:
            why = f"MISSING (expected: {EXPECTED_FROM}); {why}"
        rows.append(asdict(Row(engine.name, engine.purpose, installed, ran, why)))
    return rows


@dataclass
class Row:
    engine: str
    purpose: str
    installed: str
    ran: str  # yes / no
    why: str


def _engine_row(engine: Engine, cuda: bool, cases: list[Case] | None, version, unusable) -> tuple[str, str]:
    here = unusable or ("usable" if version else "not installed")
    if not cuda:
        return "no", f"no CUDA device (on the CPU: {here})"
    if cases is None:
        return "no", f"the gpu tests did not run ({here})"
    mine = [c for c in cases if engine.tests(c)]
    if not mine:
        return "no", f"no gpu test ran it ({here})"
    counts = {o: sum(1 for c in mine if c.outcome == o) for o in ("passed", "failed", "skipped")}
    said = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
    if counts["passed"] or counts["failed"]:
        return "yes", f"its gpu tests: {said}"
    reasons = list(dict.fromkeys(c.message for c in mine if c.message))
    tests = f"{len(mine)} gpu test{'s' if len(mine) != 1 else ''}"
    return "no", f"its {tests} skipped: {'; '.join(reasons[:2]) or here}"


def _xdist_row(cuda: bool, cases: list[Case] | None, workers_: Workers | None) -> tuple[str, str]:
    if workers_ is None:
        return "no", "the gpu tests did not run"
    if not cuda:
        return "no", f"no CUDA device: the gpu tests were only collected (they would run so: {workers_.note})"
    if cases is None:
        return "no", f"the gpu tests did not run ({workers_.note})"
    return ("yes" if workers_.used else "no"), workers_.note
