"""`make gpu-check` itself, its GPU parts exercised with every node on the CPU (the junit and
benchmark figures, the budget, a part that breaks, strict JSON), so the one call a lent GPU gets is
not spent finding bugs in the check. End to end (without CUDA, the pipeline and two-machine parts,
an interruption): tests/e2e/test_gpu_check_e2e.py."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.dora import dora_env
from tests.support.gpu_check import cpu_context, fake_gpu_suite
from tests.support.paths import ROOT
from tools.gpu_check import engines, groups, parts
from tools.gpu_check.report import FAIL, PASS, Goal, Part, Report

CLI = [sys.executable, "-m", "tools.gpu_check"]


@pytest.mark.slow  # a pytest run in a fresh interpreter
def test_junit_counts_and_the_race_trials(tmp_path):
    suite = tmp_path / "test_sample.py"
    suite.write_text(
        textwrap.dedent(f"""
        import pytest
        def test_ok(): pass
        def test_broken(): assert False
        @pytest.mark.skip(reason="no")
        def test_skipped(): pass
        def {parts.RACE_TEST}(): pass
    """)
    )
    junit = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", suite],
        cwd=tmp_path,
        capture_output=True,
    )
    counts, failed, race = parts.read_junit(junit)
    assert counts == {"passed": 2, "failed": 1, "skipped": 1}
    assert failed == ["test_sample::test_broken"] and race is True
    assert parts.read_junit(tmp_path / "missing.xml") == ({"passed": 0, "failed": 0, "skipped": 0}, [], None)


def test_a_benchmark_part_reports_the_goals_its_script_measured(tmp_path):
    script = tmp_path / "fake_bench.py"
    script.write_text(
        textwrap.dedent("""
        import json, sys
        path = sys.argv[sys.argv.index("--json") + 1]
        goals = [
            {"name": "flat", "measured": 1.2, "target": "<= 1.5", "unit": "x", "met": True, "detail": "ratio 1.20"},
            {"name": "fast", "measured": 12.0, "target": ">= 30", "unit": "x", "met": False, "detail": "12.0x"},
        ]
        json.dump({"speedup": 12.0, "goals": goals}, open(path, "w"))
    """)
    )
    ctx = cpu_context(tmp_path)
    part, goals = parts.benchmark("bench: fake", str(script), [], 60, 10)(ctx)
    assert part.status == PASS and part.summary == "1 of 2 goals met" and part.figures == {"speedup": 12.0}
    assert [(g.name, g.met, g.source) for g in goals] == [("flat", True, "bench: fake"), ("fast", False, "bench: fake")]
    report = Report(tmp_path / "r", 100)
    report.add(part, goals)
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "| fast | >= 30 x | 12 x (12.0x) | **not met** |" in markdown
    assert "| flat | <= 1.5 x | 1.2 x (ratio 1.20) | met |" in markdown


def parts_not_run_without_budget(out, **env) -> list[str]:
    """The check in a fresh interpreter with no budget: it exits 1 and names every part it ran
    none of (all that the run has, after the environment report)."""
    proc = subprocess.run(
        [*CLI, "--out", out, "--budget", "0"],
        cwd=ROOT,
        env={**dora_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    report = json.loads((out / "report.json").read_text())
    return [p["name"] for p in report["parts"] if p["summary"] == "not run: the 0 s budget was spent"]


@pytest.mark.slow  # the check in a fresh interpreter
def test_a_spent_budget_fails_the_parts_it_could_not_run(tmp_path):
    assert parts_not_run_without_budget(tmp_path) == [step.title for step in parts.PARTS]


@pytest.mark.slow  # the check in a fresh interpreter
def test_only_jpeg_runs_the_jpeg_parts_alone(tmp_path):
    not_run = parts_not_run_without_budget(tmp_path, GPU_CHECK_ONLY="jpeg")
    assert not_run == [step.title for step in parts.JPEG_PARTS] == ["gpu tests", "bench: JPEG"]


def test_only_jpeg_needs_no_dora_and_runs_the_jpeg_gpu_tests(tmp_path, monkeypatch):
    ctx = cpu_context(tmp_path)
    monkeypatch.setattr(ctx, "dora", lambda: None)
    part, _, _ = parts.environment(ctx)
    assert part.status == FAIL and "the dora CLI is missing" in part.summary
    ctx.only = "jpeg"
    part, _, _ = parts.environment(ctx)
    assert part.status == PASS and "no dora CLI (not needed for --only jpeg)" in part.summary
    for path in parts.JPEG_TESTS:
        text = (ROOT / path).read_text()
        assert "pytest.mark.gpu" in text and "dora" not in text.replace("dora-", ""), path


def test_a_part_that_breaks_is_a_failed_part_and_the_check_goes_on(tmp_path):
    from tools.gpu_check.__main__ import guarded

    def broken(ctx):
        raise KeyError("speedup")

    broken.title = "bench: broken"
    part, goals = guarded(broken, cpu_context(tmp_path))
    assert (
        part.status == FAIL
        and part.summary == "the check itself broke: KeyError: 'speedup'"
        and "KeyError" in part.tail
    )
    assert goals == []


def test_a_figure_that_is_not_a_number_still_makes_strict_json(tmp_path):
    report = Report(tmp_path, 10)
    report.add(
        Part("bench: x", PASS, 1.0, "", {"p50": float("nan")}),
        [Goal("flat", "<= 1.5", float("inf"), "x", False, "", "bench: x")],
    )
    data = json.loads(
        (tmp_path / "report.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}")
    )
    assert data["parts"][0]["figures"]["p50"] == "nan" and data["goals"][0]["measured"] == "inf"


# ------------------------------------------------------------------ xdist workers for the gpu tests
XDIST_OURS = ("--dist", "loadfile", "-p", engines.GROUPS_PLUGIN)


@pytest.mark.parametrize(
    "addopts, cpus, have_xdist, args, count, said",
    [
        (
            None,
            16,
            True,
            ("-n", "6", *XDIST_OURS),
            6,
            "6 workers for 16 CPUs, --dist loadfile with the dataflow tests as one file",
        ),  # a GPU host
        (None, 64, True, ("-n", "6", *XDIST_OURS), 6, "6 workers for 64 CPUs"),  # one GPU: never more than 6
        (None, 8, True, ("-n", "4", *XDIST_OURS), 4, "4 workers for 8 CPUs"),
        (None, 4, True, ("-n", "2", *XDIST_OURS), 2, "2 workers for 4 CPUs"),
        (None, 2, True, (), 0, "2 CPUs: the gpu tests run in one process"),  # this machine
        (None, 1, True, (), 0, "1 CPU: the gpu tests run in one process"),
        (None, 16, False, (), 0, "pytest-xdist is not installed: the gpu tests run in one process"),
        ("", 16, True, ("-n", "6", *XDIST_OURS), 6, "6 workers"),
        ("-x -q", 16, True, ("-n", "6", *XDIST_OURS), 6, "6 workers"),  # options of the caller's, none of xdist's
        # The caller's xdist options win (first-run.sh sets "-n 6 --dist loadfile"); pytest reads them.
        ("-n 6 --dist loadfile", 16, True, (), -1, "PYTEST_ADDOPTS from the caller: -n 6 --dist loadfile"),
        ("-n6 -x", 2, True, (), -1, "PYTEST_ADDOPTS from the caller: -n6"),
        ("--numprocesses=auto", 16, True, (), -1, "PYTEST_ADDOPTS from the caller: --numprocesses=auto"),
        ("-n 0", 16, True, (), 0, "PYTEST_ADDOPTS from the caller: -n 0 (one process)"),
        ("-p no:xdist", 16, True, (), 0, "PYTEST_ADDOPTS from the caller: -p no:xdist (one process)"),
        ("--dist loadfile", 16, True, (), 0, "PYTEST_ADDOPTS from the caller: --dist loadfile (one process)"),
        ("-d -x", 16, True, (), 0, "PYTEST_ADDOPTS from the caller: -d (one process)"),
        ("-p no:xdist -n 4", 16, True, (), 0, "PYTEST_ADDOPTS from the caller: -p no:xdist -n 4 (one process)"),
    ],
)
def test_the_gpu_tests_get_xdist_workers_by_the_cpus_unless_the_caller_said(
    addopts, cpus, have_xdist, args, count, said
):
    workers = engines.workers(addopts, cpus, have_xdist)
    assert (workers.args, workers.count, workers.used) == (args, count, count != 0)
    assert said in workers.note


def test_the_dataflow_tests_are_one_unit_of_work_the_others_their_files():
    assert groups.scope_of("tests/e2e/test_ipc_gpu_e2e.py::test_race") == groups.DATAFLOW
    assert groups.scope_of("tests/e2e/test_nodes_e2e.py::test_every_node_on_cuda[x::y]") == groups.DATAFLOW
    assert groups.scope_of("tests/nodes/test_jpeg_gpu.py::test_batched[torchcodec]") == "tests/nodes/test_jpeg_gpu.py"
    assert groups.scope_of("tests/nodes/test_e2e.py::test_x") == "tests/nodes/test_e2e.py"


@pytest.mark.slow  # pytest on 2 xdist workers in a fresh interpreter
@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="needs pytest-xdist")
def test_on_xdist_workers_the_dataflow_tests_run_on_one_worker_the_others_by_file(tmp_path):
    suite = fake_gpu_suite(tmp_path)
    junit = tmp_path / "junit.xml"
    workers = engines.workers(None, 4, True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *workers.args,
            "-m",
            "gpu",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            suite,
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = {path.name: path.read_text() for path in (suite / "runs").iterdir()}
    dataflow = {ran[name] for name in ("test_flow_one", "test_flow_two", parts.RACE_TEST, "test_a_dataflow_of_jpegs")}
    assert len(dataflow) == 1 and dataflow <= {"gw0", "gw1"}, ran
    assert len({ran[f"test_more[{n}]"] for n in range(6)}) == 1, ran  # a file's tests on one worker
    assert set(ran.values()) == {"gw0", "gw1"}, ran  # the units were spread
    counts, failed, race = parts.read_junit(junit)
    assert race is True and not failed and counts == {"passed": 13, "failed": 0, "skipped": 3}


# ------------------------------------------------------------------------ the optional engines table
USABLE = {
    "torchcodec": {"version": "0.16.0", "unavailable": None},
    "nvimgcodec": {"version": None, "unavailable": "nvImageCodec: not installed; pip install ..."},
    "torchvision": {"version": "0.26.0", "unavailable": None},
    "rerun": {"version": None, "unavailable": "rerun does not import (ModuleNotFoundError: No module named 'rerun')"},
    "xdist": {"version": "3.8.0", "unavailable": None},
}
SIX = engines.workers(None, 16, True)


def rows_by_engine(rows: list[dict]) -> dict[str, tuple[str, str, str]]:
    return {row["engine"]: (row["installed"], row["ran"], row["why"]) for row in rows}


def test_the_engines_table_says_which_engines_the_gpu_tests_ran_and_why_not():
    cases = [
        engines.Case("tests.nodes.test_jpeg_gpu", "test_batched[torchcodec]", "passed"),
        engines.Case("tests.nodes.test_jpeg_seed_002", "test_loop[cuda-torchcodec]", "failed", "AssertionError"),
        engines.Case("tests.nodes.test_jpeg_seed_002", "test_loop[cuda-torchvision]", "passed"),
        engines.Case("tests.nodes.test_jpeg_gpu", engines.TORCHVISION_CUDA_TESTS[0], "passed"),
        engines.Case(
            "tests.nodes.test_jpeg_gpu", "test_batched[nvimgcodec]", "skipped", "nvimgcodec on cuda: not installed"
        ),
        engines.Case(
            "tests.nodes.test_jpeg_seed_002",
            "test_loop[cuda-nvimgcodec]",
            "skipped",
            "nvimgcodec on cuda: not installed",
        ),
        engines.Case(
            "tests.nodes.test_rerun_sink",
            "test_cuda_tensors_are_shown_from_a_host_copy",
            "skipped",
            "rerun does not import",
        ),
        engines.Case("tests.e2e.test_ipc_gpu_e2e", parts.RACE_TEST, "passed"),
    ]
    rows = engines.table(USABLE, True, cases, SIX)
    assert [r["engine"] for r in rows] == [
        "torchcodec",
        "nvImageCodec",
        "torchvision CUDA codecs",
        "rerun-sdk",
        "pytest-xdist",
    ]
    assert rows_by_engine(rows) == {
        "torchcodec": ("0.16.0", "yes", "its gpu tests: 1 passed, 1 failed"),
        "nvImageCodec": ("missing", "no", "its 2 gpu tests skipped: nvimgcodec on cuda: not installed"),
        "torchvision CUDA codecs": ("0.26.0", "yes", "its gpu tests: 2 passed"),
        "rerun-sdk": ("missing", "no", "its 1 gpu test skipped: rerun does not import"),
        "pytest-xdist": ("3.8.0", "yes", SIX.note),
    }
    assert engines.missing_expected(USABLE) == []
    # The gpu tests cut short before any JPEG test ran, or run in one process.
    early = rows_by_engine(engines.table(USABLE, True, cases[-1:], engines.workers(None, 2, True)))
    assert early["torchcodec"] == ("0.16.0", "no", "no gpu test ran it (usable)")
    assert early["pytest-xdist"] == ("3.8.0", "no", "2 CPUs: the gpu tests run in one process")


def test_without_cuda_the_engines_table_says_what_is_usable_on_the_cpu():
    rows = rows_by_engine(engines.table(USABLE, False, None, engines.workers(None, 2, False)))
    assert rows["torchcodec"] == ("0.16.0", "no", "no CUDA device (on the CPU: usable)")
    assert rows["rerun-sdk"][1:] == ("no", f"no CUDA device (on the CPU: {USABLE['rerun']['unavailable']})")
    assert rows["pytest-xdist"][1] == "no" and "pytest-xdist is not installed" in rows["pytest-xdist"][2]
    # Before the gpu tests part (the report written after the environment part) nothing is decided.
    assert rows_by_engine(engines.table({}, False, None, None))["pytest-xdist"] == (
        "missing",
        "no",
        "the gpu tests did not run",
    )


@pytest.mark.parametrize(
    "torchcodec, installed",
    [
        ({"version": None, "unavailable": "torchcodec does not import (ModuleNotFoundError: ...)"}, "missing"),
        (
            {"version": "0.16.0", "unavailable": "torchcodec does not import (OSError: libtorchcodec.so)"},
            "0.16.0 (does not load)",
        ),
    ],
)
def test_torchcodec_is_expected_and_its_absence_is_said_first(tmp_path, torchcodec, installed):
    optional = {**USABLE, "torchcodec": torchcodec}
    cases = [
        engines.Case("tests.nodes.test_jpeg_gpu", "test_batched[torchcodec]", "skipped", "torchcodec on cuda: gone")
    ]
    row = rows_by_engine(engines.table(optional, True, cases, SIX))["torchcodec"]
    assert row[:2] == (installed, "no") and row[2].startswith(f"MISSING (expected: {engines.EXPECTED_FROM}); ")
    assert row[2].endswith("its 1 gpu test skipped: torchcodec on cuda: gone")
    [warning] = engines.missing_expected(optional)
    assert warning.startswith("torchcodec is missing, and expected") and torchcodec["unavailable"] in warning
    report = Report(tmp_path, 100)
    report.warnings, report.engines = [warning], engines.table(optional, True, cases, SIX)
    report.write()
    markdown = (tmp_path / "report.md").read_text()
    assert (
        markdown.index("**Warning: torchcodec is missing")
        < markdown.index("| part |")
        < markdown.index("## Optional engines")
    )
    assert (
        "| torchcodec | the JPEG nodes' default engine (CPU and nvJPEG) | " + installed + " | no | MISSING" in markdown
    )
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["warnings"] == [warning] and data["engines"][0]["why"] == row[2]


def test_junit_names_lose_xdist_group_suffixes(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        textwrap.dedent(f"""\
        <testsuites><testsuite>
        <testcase classname="tests.e2e.test_ipc_gpu_e2e" name="{parts.RACE_TEST}@dataflow" />
        <testcase classname="tests.nodes.test_jpeg_gpu" name="test_batched[torchcodec]@tests.nodes.test_jpeg_gpu" />
        <testcase classname="tests.nodes.test_jpeg_gpu" name="test_batched[a@b]" />
        <testcase classname="tests.nodes.test_jpeg_gpu" name="test_batched[nvimgcodec]@tests.nodes.test_jpeg_gpu">
          <skipped type="pytest.skip" message="nvimgcodec on cuda: not installed">why</skipped></testcase>
        <testcase classname="tests.nodes.test_x" name="test_broken@tests.nodes.test_x">
          <failure message="assert False&#10;more">trace</failure></testcase>
        </testsuite></testsuites>
    """)
    )
    assert parts.read_cases(junit) == [
        engines.Case("tests.e2e.test_ipc_gpu_e2e", parts.RACE_TEST, "passed"),
        engines.Case("tests.nodes.test_jpeg_gpu", "test_batched[torchcodec]", "passed"),
        engines.Case("tests.nodes.test_jpeg_gpu", "test_batched[a@b]", "passed"),
        engines.Case(
            "tests.nodes.test_jpeg_gpu", "test_batched[nvimgcodec]", "skipped", "nvimgcodec on cuda: not installed"
        ),
        engines.Case("tests.nodes.test_x", "test_broken", "failed", "assert False"),
    ]
    assert parts.read_junit(junit) == (
        {"passed": 3, "failed": 1, "skipped": 1},
        ["tests.nodes.test_x::test_broken"],
        True,
    )


@pytest.mark.slow  # pytest over a suite of its own in a fresh interpreter
def test_the_gpu_tests_part_runs_them_and_the_engines_table_reads_their_results(tmp_path):
    ctx = cpu_context(tmp_path)
    ctx.test_paths = [str(fake_gpu_suite(tmp_path / "suite"))]
    ctx.environment = {"optional": USABLE}
    part, [race] = parts.gpu_tests(ctx)
    assert part.status == PASS, part
    assert part.figures["passed"] == 13 and part.figures["skipped"] == 3 and race.met is True
    assert part.figures["workers"] == ctx.workers.note
    rows = rows_by_engine(engines.table(USABLE, True, ctx.cases, ctx.workers))
    assert rows["torchcodec"] == ("0.16.0", "yes", "its gpu tests: 2 passed")
    assert rows["nvImageCodec"][1:] == (
        "no",
        "its 2 gpu tests skipped: nvimgcodec on cuda: nvImageCodec: not installed",
    )
    assert rows["rerun-sdk"][1] == "no" and "rerun does not import" in rows["rerun-sdk"][2]
    assert (tmp_path / "out" / "gpu-tests.xml").exists()


# ------------------------------------------------------------------------------------ the budget
def test_each_part_leaves_the_parts_after_it_their_floors(tmp_path, monkeypatch):
    from tools.gpu_check.__main__ import run_all

    limits = {}

    def step(name, floor):
        def part(ctx):
            limits[name] = round(ctx.limit(1000))
            return Part(name, PASS, 0.0, ""), []

        part.title, part.floor = name, floor
        return part

    monkeypatch.setattr(parts, "PARTS", [step("first", 60), step("second", 100), step("third", 40)])
    monkeypatch.setattr(parts, "environment", lambda ctx: (Part("environment", PASS, 0.0, ""), [], {"cuda": True}))
    ctx = cpu_context(tmp_path, budget=300)
    report = Report(tmp_path / "r", 300)
    run_all(ctx, report)
    assert limits == {"first": 160, "second": 260, "third": 300}  # 300 less 140, less 40, less nothing
    assert [p.name for p in report.parts] == ["environment", "first", "second", "third"]
    assert [e["engine"] for e in report.engines][-1] == "pytest-xdist"
    # Never less than half of what is left, however much the later parts were to be left.
    ctx.reserve = 1000
    assert 140 <= ctx.limit(1000) <= 150
