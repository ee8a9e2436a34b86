"""bench/compare_revisions.py: small_message.py and dora_latency.py run from a base revision (a git
worktree) and from the working tree, interleaved, and compared. Its arguments and its comparison
are tested on their own; one quick comparison runs for real in a scratch repository (a copy of
tensor_codec/ and bench/ committed once, compared against its own HEAD), so that nothing is
written into this repository's worktrees or out/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.support.bench import check_envelope, check_goals, load_module, positive
from tests.support.paths import ROOT


@pytest.fixture
def compare(monkeypatch):
    return load_module("compare_revisions", monkeypatch)


def test_arguments_default_to_the_full_comparison_and_refuse_nonsense(compare):
    """The defaults (base 4423d45, three rounds, both benchmarks, 10% tolerance) and the
    arguments refused before anything runs: no rounds, an unknown benchmark."""
    args = compare.parse_args([])
    assert (args.base, args.quick, args.rounds, args.only, args.tolerance, args.json) == (
        compare.DEFAULT_BASE,
        False,
        3,
        None,
        0.10,
        None,
    )
    assert args.scripts == "own"
    args = compare.parse_args(["--base", "HEAD~2", "--quick", "--rounds", "1", "--only", "small_message"])
    assert (args.base, args.quick, args.rounds, args.only) == ("HEAD~2", True, 1, ["small_message"])
    assert compare.parse_args(["--scripts", "current"]).scripts == "current"
    for wrong in (["--rounds", "0"], ["--only", "header_cost"], ["--scripts", "base"]):
        with pytest.raises(SystemExit) as refused:
            compare.parse_args(wrong)
        assert refused.value.code == 2


def small_message_results(warm_us: float) -> dict:
    return {"baseline_us": 6.0, "warm_us": warm_us, "cold_us": 30.0, "wrap_only_us": 3.0}


def test_the_comparison_reads_both_revisions_and_judges_the_goals(compare):
    """Rows per case with both trees' medians and current/base; a case only one revision writes
    is named, not compared; the older layout (rows only) is read too; a tc case more than the
    tolerance slower fails 'no path slower', and the issue-18 goals read the current medians."""
    base = [{"rows": [{"case": k, "us": v} for k, v in (("baseline", 6.0), ("warm", 10.0), ("cold", 30.0))]}]
    current = [small_message_results(12.0), small_message_results(12.0)]
    rows, one_sided = compare.compare({"small_message": {"base": base, "current": current}}, ["small_message"])
    by_key = {r["key"]: r for r in rows}
    assert by_key["warm"]["ratio"] == pytest.approx(1.2) and by_key["warm"]["tc"]
    assert by_key["baseline"]["ratio"] == 1.0 and not by_key["baseline"]["tc"]
    assert by_key["warm/baseline"]["current_median"] == pytest.approx(2.0)
    assert one_sided == ["small_message: tv_tensors.wrap alone (current only)"]
    goals = compare.goals_of(rows, 0.10, ["small_message"])
    check_goals(goals)
    assert [g["met"] for g in goals] == [False, True, True]  # warm 1.2x slower; 12 us < 15; 30 us < 40
    latency = compare.cases_dora_latency(
        {"summary": {"contiguous/1MB": {"tc": 1.0, "pa.array": 2.0, "tc/pa.array": 0.5}}}
    )
    assert latency["contiguous/1MB tc / pa.array"]["key"] == "contiguous/1MB:tc/pa.array"


@pytest.mark.slow  # two runs of small_message.py, each a fresh interpreter
def test_a_quick_comparison_against_head_runs_in_a_scratch_repository(tmp_path):
    """--quick, one round, small_message only, against HEAD of a scratch repository, both trees
    running the current tree's script (--scripts current): the base worktree is made, each tree's
    run uses its own tensor_codec and the script's bench helpers (the child checks both), and the
    comparison is written with both trees' figures and no failed run."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    for part in ("tensor_codec", "bench"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(
        os.environ,
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="bench test",
        GIT_AUTHOR_EMAIL="bench@example.invalid",
        GIT_COMMITTER_NAME="bench test",
        GIT_COMMITTER_EMAIL="bench@example.invalid",
    )
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "scratch"]):
        subprocess.run([git, *command], cwd=repo, env=env, check=True, capture_output=True)
    head = subprocess.run([git, "rev-parse", "HEAD"], cwd=repo, env=env, check=True, capture_output=True, text=True)
    results = tmp_path / "compare_revisions.json"
    args = ["--base", "HEAD", "--quick", "--rounds", "1", "--only", "small_message", "--scripts", "current"]
    args += ["--json", str(results)]
    proc = subprocess.run(
        [sys.executable, str(repo / "bench" / "compare_revisions.py"), *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(results.read_text())
    check_envelope(data, "compare_revisions")
    assert (data["base_commit"], data["current_head"], data["mode"], data["scripts"]) == (
        head.stdout.strip(),
        head.stdout.strip(),
        "quick",
        "current",
    )
    assert data["failures"] == [] and data["not_compared"] == []
    assert {r["key"] for r in data["rows"]} == {
        "baseline",
        "warm",
        "cold",
        "wrap_only",
        "warm/baseline",
        "cold/baseline",
    }
    for row in data["rows"]:
        assert len(row["base"]) == len(row["current"]) == 1, row
        assert positive(row["base_median"]) and positive(row["current_median"]) and positive(row["ratio"]), row
    check_goals(data["goals"])
    work = repo / "out" / "bench" / "compare_revisions"
    assert sorted(p.name for p in work.glob("*.json")) == [
        "small_message-base-r1.json",
        "small_message-current-r1.json",
    ]
    # The current tree's script, each tree's own tensor_codec.
    base_log = (work / "small_message-base-r1.log").read_text()
    assert f"tensor_codec from {(repo / 'out' / 'bench').resolve()}" in base_log and "/base-" in base_log, base_log[
        -500:
    ]
    current_log = (work / "small_message-current-r1.log").read_text()
    assert f"tensor_codec from {repo.resolve() / 'tensor_codec'}" in current_log, current_log[-500:]
