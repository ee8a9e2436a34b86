"""Per-message cost of two revisions measured in one run (issue 18): bench/small_message.py and
bench/dora_latency.py from a base revision and from the current working tree, interleaved.

    python bench/compare_revisions.py [--base REV] [--quick] [--rounds N] [--only NAME]

The base revision (default 4423d45, the last commit before the issue-18 redesign; any git
revision works) is checked out as a detached git worktree in out/bench/base-<commit>/ (git-ignored;
reused when it is already there at that commit, replaced when it is not; worktrees whose folder
is gone are pruned). Each benchmark then runs from BOTH trees, base and current alternating round
by round (B C B C B C), so that the load of a shared machine hits both alike. Every run is a
subprocess of this interpreter (sys.executable) with its tree as the current directory and first
on PYTHONPATH, running that tree's own bench script against that tree's own tensor_codec; before
it starts, the child checks that `tensor_codec` (and after it, the bench helpers it loaded) come
from that tree, and refuses to measure otherwise. The current tree is the working tree as it is,
uncommitted changes included. `--scripts current` runs the current tree's bench scripts in both
trees instead (each still with its own tensor_codec): the same measurement of both codecs, for when
the benchmark itself changed (new contenders, another order) since the base.

Each run writes its own JSON (out/bench/compare_revisions/<bench>-<base|current>-r<round>.json,
with its output beside it as .log); the keys both revisions' scripts write are read, the median
over the rounds taken per case, and a table printed: case, base median, current median,
current/base. Then the goals of issue 18:

    no path slower     every tensor_codec case's current/base <= 1 + --tolerance (default 0.10,
                       the noise of a shared 2-core machine)
    warm < 15 us       1 KB BoundingBoxes, header seen before, encode + decode (current median)
    cold < 40 us       the same with a header never seen before
    1 MB vs pa.array   contiguous 1 MB end to end, tc p50 / pa.array pattern p50 <= 1.0x (the
                       median of the current rounds' ratios, each measured within one run)

The comparison's own results go to out/bench/compare_revisions.json (bench/_results.py's
envelope). Needs git. Exit status 0 when every run finished (goals met or not), 1 when a run
failed, 2 for a revision or worktree git refused.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _results import RESULTS_DIR, add_json_option  # noqa: E402  (light: torch only for the envelope at the end)

DEFAULT_BASE = "4423d45"  # the last commit before the issue-18 redesign
WORK_DIR = RESULTS_DIR / "compare_revisions"  # each run's JSON and log
GOAL_WARM_US, GOAL_COLD_US, GOAL_PA_RATIO = 15.0, 40.0, 1.0  # issue 18

# Arguments per benchmark: the full run is each script's defaults, --quick a shorter one.
BENCHES = {
    "small_message": {"full": [], "quick": ["--batch", "1000", "--batches", "7"]},
    "dora_latency": {"full": [], "quick": ["--sizes", "1", "--reps", "20", "--warmup", "3"]},
}

# Runs in the child before the bench script: checks where tensor_codec comes from, then runs the
# script as `python <script> <args>` would (its folder first on sys.path), then checks the bench
# helpers it loaded (from the script's tree). argv: tree, script, the script's arguments.
CHILD = r"""
import importlib.util, os, runpy, sys
tree, script = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
scripts = os.path.dirname(os.path.dirname(script))
def check(name, origin, expected, root=tree):
    expected = os.path.join(root, expected)
    if origin is None or os.path.realpath(origin) != expected:
        print(f"compare_revisions: {name} would come from {origin}, not {expected}: not measured",
              file=sys.stderr, flush=True)
        os._exit(97)
spec = importlib.util.find_spec("tensor_codec")
check("tensor_codec", spec and spec.origin, os.path.join("tensor_codec", "__init__.py"))
print(f"compare_revisions: tensor_codec from {spec.origin}", file=sys.stderr, flush=True)
sys.argv = [script, *sys.argv[3:]]
sys.path[0] = os.path.dirname(script)
runpy.run_path(script, run_name="__main__")
for name in ("tensor_codec", "_results", "_goals", "_timing"):
    module = sys.modules.get(name)
    if module is not None:
        if name == "tensor_codec":
            check(name, getattr(module, "__file__", None), os.path.join("tensor_codec", "__init__.py"))
        else:
            check(name, getattr(module, "__file__", None), os.path.join("bench", name + ".py"), scripts)
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="See the top of bench/compare_revisions.py for what is compared."
    )
    parser.add_argument(
        "--base",
        default=DEFAULT_BASE,
        metavar="REV",
        help=f"the revision to compare against (default {DEFAULT_BASE}, before the redesign)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="shorter runs: small_message 7 batches of 1000, dora_latency 1 MB only, 20 reps",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs per tree and benchmark, interleaved base/current (default 3)"
    )
    parser.add_argument(
        "--only", choices=list(BENCHES), action="append", help="this benchmark only (repeatable; default both)"
    )
    parser.add_argument(
        "--scripts",
        choices=["own", "current"],
        default="own",
        help="the benchmark scripts each tree runs: its own (default), or the current tree's for both "
        "(the same measurement of both codecs, when the benchmark itself changed)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.10,
        help="'no path slower' allows current/base up to 1 + this (default 0.10)",
    )
    add_json_option(parser, "compare_revisions")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


# -- git ------------------------------------------------------------------------------------------


class GitError(Exception):
    pass


def git(*args: str, cwd: Path = ROOT, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout.strip()


def worktrees() -> dict[Path, str | None]:
    """The repository's worktrees: folder -> the commit checked out (None when detached info is
    missing, e.g. a worktree whose folder is gone)."""
    out, path = {}, None
    for line in git("worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = Path(line[len("worktree ") :]).resolve()
            out[path] = None
        elif line.startswith("HEAD ") and path is not None:
            out[path] = line[len("HEAD ") :]
    return out


def base_worktree(rev: str) -> tuple[Path, str]:
    """A detached worktree of `rev` in out/bench/base-<short commit>: -> (its folder, the commit)."""
    try:
        commit = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except GitError:
        raise GitError(f"{rev!r} is not a commit of {ROOT}") from None
    short = git("rev-parse", "--short=7", commit)
    folder = (RESULTS_DIR / f"base-{short}").resolve()
    git("worktree", "prune")  # registrations whose folder was deleted (make clean removes out/)
    known = worktrees()
    if folder in known:
        dirty = git("status", "--porcelain", "--untracked-files=no", cwd=folder, check=False)
        if known[folder] == commit and not dirty:
            print(f"base: reusing the worktree {folder.relative_to(ROOT)} at {short}")
            return folder, commit
        print(
            f"base: {folder.relative_to(ROOT)} is stale ({'modified' if dirty else 'at ' + str(known[folder])[:7]}): "
            "replacing it"
        )
        git("worktree", "remove", "--force", str(folder))
    elif folder.exists():  # a folder git does not know as a worktree: left over, not ours to keep
        print(f"base: {folder.relative_to(ROOT)} is not a worktree: replacing it")
        import shutil

        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    git("worktree", "add", "--detach", str(folder), commit)
    print(f"base: worktree {folder.relative_to(ROOT)} added at {short}")
    return folder, commit


# -- running the benchmarks -----------------------------------------------------------------------


def run_bench(
    tree: Path, bench: str, args: list[str], json_path: Path, timeout: float, scripts: Path | None = None
) -> tuple[dict | None, str]:
    """One run of bench/<bench>.py of `scripts` (default `tree`) with `tree`'s own tensor_codec:
    -> (its results, or None and why not)."""
    script = (scripts or tree) / "bench" / f"{bench}.py"
    if not script.exists():
        return None, f"{script.relative_to(ROOT)} does not exist in that revision"
    json_path.unlink(missing_ok=True)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), *inherited]), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-c", CHILD, str(tree), str(script), *args, "--json", str(json_path)]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
        output, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:  # its output comes as bytes, text=True or not
        text = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
        output, rc = f"{text(e.stdout)}{text(e.stderr)}\n(timed out after {timeout:.0f} s)", -1
    json_path.with_suffix(".log").write_text(output)
    took = time.monotonic() - start
    if rc != 0 or not json_path.exists():
        tail = "\n".join(str(output).strip().splitlines()[-6:])
        return None, f"exit status {rc} after {took:.0f} s; last lines:\n{tail}"
    return json.loads(json_path.read_text()), f"{took:.0f} s"


# What is read from each benchmark's results: case -> (unit, value), only keys both revisions write.
# `tc` says whether the case is tensor_codec's own cost ('no path slower' looks at those); the others
# (the baselines) say how loaded the machine was.


def cases_small_message(data: dict) -> dict[str, dict]:
    us = {}
    for key in ("baseline", "warm", "cold", "wrap_only"):
        if isinstance(data.get(f"{key}_us"), (int, float)):
            us[key] = data[f"{key}_us"]
        else:  # an older layout: the rows only
            found = [r.get("us") for r in data.get("rows", []) if isinstance(r, dict) and r.get("case") == key]
            if found and isinstance(found[0], (int, float)):
                us[key] = found[0]
    names = {
        "baseline": ("pa.array baseline", False),
        "warm": ("tc warm (header seen before)", True),
        "cold": ("tc cold (header never seen)", True),
        "wrap_only": ("tv_tensors.wrap alone", False),
    }
    out = {names[k][0]: {"unit": "us", "value": v, "tc": names[k][1], "key": k} for k, v in us.items()}
    for key in ("warm", "cold"):  # within one run: what the machine's load cannot move much
        if key in us and us.get("baseline"):
            out[f"{names[key][0]} / pa.array baseline"] = {
                "unit": "x",
                "value": us[key] / us["baseline"],
                "tc": True,
                "key": f"{key}/baseline",
            }
    return out


def cases_dora_latency(data: dict) -> dict[str, dict]:
    out = {}
    summary = data.get("summary")
    if not isinstance(summary, dict):
        return out
    for where, figures in summary.items():  # "contiguous/1MB" -> {contender: p50 ms, "tc/baseline", "tc/pa.array"}
        if not isinstance(figures, dict):
            continue
        for key, name, unit, tc in (
            ("tc", "tc p50", "ms", True),
            ("pa.array", "pa.array p50", "ms", False),
            ("tc/pa.array", "tc / pa.array", "x", True),
            ("tc/baseline", "tc / raw send", "x", True),
        ):
            value = figures.get(key)
            if isinstance(value, (int, float)) and value == value:  # not NaN
                out[f"{where} {name}"] = {"unit": unit, "value": value, "tc": tc, "key": f"{where}:{key}"}
    return out


EXTRACT = {"small_message": cases_small_message, "dora_latency": cases_dora_latency}


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def compare(runs: dict, benches: list[str]) -> tuple[list[dict], list[str]]:
    """Rows of the table: per benchmark and case, both trees' values over the rounds; and the cases
    only one revision writes (named, not compared)."""
    rows, one_sided = [], []
    for bench in benches:
        per_tree = {
            tree: [EXTRACT[bench](data) for data in runs[bench][tree] if data is not None]
            for tree in ("base", "current")
        }
        seen = {tree: [set(c) for c in found] for tree, found in per_tree.items()}
        names = {tree: set.union(*s) if s else set() for tree, s in seen.items()}
        order = [c for found in per_tree["current"] + per_tree["base"] for c in found]
        for case in dict.fromkeys(order):
            if not (case in names["base"] and case in names["current"]):
                one_sided.append(f"{bench}: {case} ({'current' if case in names['current'] else 'base'} only)")
                continue
            values = {
                tree: [found[case]["value"] for found in per_tree[tree] if case in found]
                for tree in ("base", "current")
            }
            info = next(found[case] for found in per_tree["current"] if case in found)
            b, c = median(values["base"]), median(values["current"])
            rows.append(
                {
                    "bench": bench,
                    "case": case,
                    "key": info["key"],
                    "unit": info["unit"],
                    "tc": info["tc"],
                    "base": values["base"],
                    "current": values["current"],
                    "base_median": b,
                    "current_median": c,
                    "ratio": c / b if b else None,
                }
            )
    return rows, one_sided


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.1f} {unit}" if unit == "us" else f"{value:.3f} {unit}"


def goals_of(rows: list[dict], tolerance: float, benches: list[str]) -> list[dict]:
    from _goals import goal

    def row(key):
        return next((r for r in rows if r["key"] == key), None)

    out = []
    tc_rows = [r for r in rows if r["tc"] and r["ratio"] is not None]
    if tc_rows:
        worst = max(tc_rows, key=lambda r: r["ratio"])
        slower = [f"{r['bench']}: {r['case']} {r['ratio']:.2f}x" for r in tc_rows if r["ratio"] > 1 + tolerance]
        out.append(
            goal(
                f"no path slower than the base (current/base <= {1 + tolerance:g} on every tc case)",
                worst["ratio"],
                "<=",
                1 + tolerance,
                "x",
                f"worst {worst['bench']}: {worst['case']} {worst['ratio']:.2f}x"
                + (f"; slower: {', '.join(slower)}" if slower else ""),
            )
        )
    wanted = []
    if "small_message" in benches:
        wanted += [
            ("warm", "1 KB TVTensor, header seen before, encode + decode under 15 us", "<", GOAL_WARM_US, "us"),
            ("cold", "1 KB TVTensor, header never seen before, encode + decode under 40 us", "<", GOAL_COLD_US, "us"),
        ]
    if "dora_latency" in benches:
        wanted += [
            (
                "contiguous/1MB:tc/pa.array",
                "contiguous 1 MB end to end no slower than the pa.array pattern",
                "<=",
                GOAL_PA_RATIO,
                "x",
            )
        ]
    for key, name, op, target, unit in wanted:
        r = row(key)
        if r is None or r["current_median"] is None:
            out.append(
                {
                    "name": name,
                    "measured": None,
                    "target": f"{op} {target:g}",
                    "unit": unit,
                    "met": False,
                    "detail": "not measured",
                }
            )
            continue
        out.append(
            goal(
                name,
                r["current_median"],
                op,
                target,
                unit,
                f"current {fmt(r['current_median'], unit)}, base {fmt(r['base_median'], unit)}",
            )
        )
    return out


def print_table(rows: list[dict]) -> None:
    width = max([len(f"{r['bench']}: {r['case']}") for r in rows] + [4])
    print(f"{'case':{width}s}  {'base median':>13s}  {'current median':>14s}  {'current/base':>12s}")
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        note = ""
        if r["ratio"] is not None and r["tc"]:
            note = "  faster" if r["ratio"] < 0.9 else "  SLOWER" if r["ratio"] > 1.1 else ""
        elif not r["tc"]:
            note = "  (baseline: machine load)"
        print(
            f"{r['bench'] + ': ' + r['case']:{width}s}  {fmt(r['base_median'], r['unit']):>13s}  "
            f"{fmt(r['current_median'], r['unit']):>14s}  {ratio:>12s}{note}"
        )


def main(argv=None) -> int:
    args = parse_args(argv)
    benches = args.only or list(BENCHES)
    mode = "quick" if args.quick else "full"
    try:
        base_tree, base_commit = base_worktree(args.base)
        head = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", "tensor_codec", "bench", "nodes"))
    except GitError as e:
        print(f"compare_revisions: {e}", file=sys.stderr)
        return 2
    trees = {"base": base_tree, "current": ROOT}
    print(f"base:    {args.base} = {base_commit[:10]} in {base_tree.relative_to(ROOT)}")
    print(f"current: the working tree {ROOT} (HEAD {head[:10]}{', with uncommitted changes' if dirty else ''})")
    scripts = "the current tree's scripts for both" if args.scripts == "current" else "each tree's own scripts"
    print(f"{mode} runs, {args.rounds} rounds per tree, interleaved base/current, {scripts}; python {sys.executable}\n")
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    timeout = 600 if args.quick else 1800
    runs = {bench: {"base": [], "current": []} for bench in benches}
    failures, loads = [], []
    for bench in benches:
        for rnd in range(1, args.rounds + 1):
            for tree in ("base", "current"):
                path = WORK_DIR / f"{bench}-{tree}-r{rnd}.json"
                load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # how shared the machine was
                scripts = ROOT if args.scripts == "current" else None
                data, how = run_bench(trees[tree], bench, BENCHES[bench][mode], path, timeout, scripts)
                runs[bench][tree].append(data)
                loads.append({"bench": bench, "tree": tree, "round": rnd, "load_before": load})
                shown = f", load average {load:.1f} before" if load is not None else ""
                if data is None:
                    failures.append({"bench": bench, "tree": tree, "round": rnd, "why": how})
                    print(f"  {bench:14s} {tree:8s} round {rnd}: FAILED{shown}, {how}")
                else:
                    print(f"  {bench:14s} {tree:8s} round {rnd}: {how}{shown}")
    rows, one_sided = compare(runs, benches)
    print()
    print(
        f"Per-message cost, median of {args.rounds} rounds per tree (lower is better; ratios over 1 are the current "
        "tree slower)"
    )
    print_table(rows)
    if one_sided:
        print("not compared (one revision's scripts do not write them): " + "; ".join(one_sided))
    goals = goals_of(rows, args.tolerance, benches)
    print("\nGoals (issue 18), on the current tree:")
    for g in goals:
        print(f"  {'met    ' if g['met'] else 'NOT met'}  {g['name']} ({g['detail']})")
    if failures:
        print(f"\n{len(failures)} run(s) failed (their logs: {WORK_DIR.relative_to(ROOT)}/):")
        for f in failures:
            print(f"  {f['bench']} {f['tree']} round {f['round']}: {f['why'].splitlines()[0]}")

    from _results import save  # the envelope imports torch: only now

    figures = {
        "base_rev": args.base,
        "base_commit": base_commit,
        "current_head": head,
        "current_dirty": dirty,
        "mode": mode,
        "scripts": args.scripts,
        "rounds": args.rounds,
        "tolerance": args.tolerance,
        "benches": {b: BENCHES[b][mode] for b in benches},
        "rows": rows,
        "not_compared": one_sided,
        "goals": goals,
        "failures": failures,
        "runs": loads,
    }
    save(
        "compare_revisions",
        f"the base revision {args.base} ({base_commit[:10]}), run interleaved with the current tree",
        figures,
        args.json,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
