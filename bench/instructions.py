"""Instructions per call of bench/small_message.py's cases, counted by valgrind's callgrind: a
figure the machine's load does not move, for goals a shared machine cannot time.

    python bench/instructions.py [--calls N] [--base REV] [--json PATH]

`small_message.py`'s goals (under 15 us with a header seen before, under 40 us with a new one) are
times, and on a shared 2-core machine its baseline alone moves from 6 to 19 us between days. The
instructions a call executes do not: callgrind counts them whatever else the machine does (the
same tree counts the same in every run, PYTHONHASHSEED fixed). They are
no time (a cache miss costs more than an add), but between two revisions of the same code, or
against the baseline measured in the same process, their ratio says what a quiet machine's clock
would, without its noise.

How: one interpreter under `valgrind --tool=callgrind` imports the tree's tensor_codec and the
cases `small_message.make_cases` builds (the same calls that script times), warms each up, then
runs each case's calls from inside one ctypes callback (libc's `lfind` calls it once per element).
Callgrind collects only inside ctypes' callback function (`--toggle-collect=closure_fcn`) and
writes what it collected each time `math.lgamma` is called (`--dump-before=math_lgamma`), once
after each case: one file per case, its total over `--calls` calls. An empty case's count (the
callback's own cost) is taken off each. The garbage collector's passes are counted where they
fall, as they would be timed; each case starts after a full collection, so that what the case
before left behind does not move its count (tv_tensors.wrap, the same code in both trees,
counted 4 % apart without it). Importing torch under valgrind takes a few minutes.

`--base REV` counts the same cases (this tree's small_message.py) against another revision's
tensor_codec too, in a git worktree (compare_revisions.py's), both at once: deterministic counts
need no interleaving. Needs valgrind (Debian's package) and a Python whose ctypes and math
modules keep their symbols (python.org and pyenv builds do); says so and exits 2 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _results import add_json_option  # noqa: E402  (light: torch is imported after the arguments)

BASELINE = "small_message.py's baseline (pa.array + torch.from_numpy of the bare bytes), counted in the same process"
EMPTY = "empty"  # the callback alone, taken off every case
WARMUP_CALLS = 30  # each case's calls before counting: caches filled, the first header compiled
COLLECTED_IN = "closure_fcn"  # CPython's ctypes: the C function that runs a Python callback
DUMP_AT = "math_lgamma"  # CPython's math.lgamma: called once after each case, nowhere else

CASES_FROM = "small_message:make_cases"  # module:function (calls) -> case name -> call

# Runs under valgrind: argv = tree, bench folder, calls, CASES_FROM. Prints the case names in the
# order their counts were written (JSON, last line of stdout).
CHILD = r"""
import ctypes, gc, importlib, json, math, os, sys
tree, bench, calls, cases_from = os.path.realpath(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, bench)
from instructions import EMPTY, WARMUP_CALLS
module, function = cases_from.split(":")
cases = {EMPTY: lambda: None, **getattr(importlib.import_module(module), function)(WARMUP_CALLS + calls + 1)}
loaded = sys.modules.get("tensor_codec")
if loaded is not None and not os.path.realpath(loaded.__file__).startswith(tree + os.sep):
    print(f"instructions: tensor_codec from {loaded.__file__}, not {tree}: not counted", file=sys.stderr)
    sys.exit(97)
libc = ctypes.CDLL(None)
libc.lfind.restype = ctypes.c_void_p
COMPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
elements, missing = (ctypes.c_int * calls)(), ctypes.c_int(-1)
math.lgamma(1.0)  # the first file: anything collected before the cases
for name, call in cases.items():
    for _ in range(WARMUP_CALLS):
        call()
    gc.collect()  # each case starts from the same collector state, whatever the case before left
    def compare(_a, _b, call=call):
        call()
        return 1  # never found: lfind calls it for every element
    callback = COMPARE(compare)
    count = ctypes.c_size_t(calls)
    libc.lfind(ctypes.byref(missing), elements, ctypes.byref(count), ctypes.sizeof(ctypes.c_int), callback)
    math.lgamma(1.0)
print(json.dumps(list(cases)))
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="counted calls per case (default 200)")
    parser.add_argument("--base", help="also count another revision's tensor_codec (a git worktree)")
    add_json_option(parser, "instructions")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error(f"--calls: expected at least 1, got {args.calls}")
    return args


def valgrind_command(out_file: str, python: str = sys.executable) -> list[str]:
    """The valgrind command line that runs CHILD, collecting as described in the module's doc."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        f"--toggle-collect={COLLECTED_IN}",
        f"--dump-before={DUMP_AT}",
        f"--callgrind-out-file={out_file}",
        python,
        "-c",
        CHILD,
    ]


def dump_totals(folder: Path, stem: str) -> list[int]:
    """The instruction totals of callgrind's numbered dumps `<stem>.<n>` in `folder`, by n."""
    parts = []
    for path in folder.glob(f"{stem}.*"):
        suffix = path.name[len(stem) + 1 :]
        if suffix.isdigit():
            totals = [
                line.split()[1] for line in path.read_text(errors="replace").splitlines() if line.startswith("totals:")
            ]
            parts.append((int(suffix), int(totals[0]) if totals else 0))
    return [total for _, total in sorted(parts)]


def per_call(names: list[str], totals: list[int], calls: int) -> dict[str, float]:
    """name -> instructions per call, the empty case's taken off. `totals`: the dumps by number,
    the first one (before any case) included."""
    if len(totals) != len(names) + 1:  # one more (math.lgamma called inside a case) would shift them all
        hint = f": no {DUMP_AT} seen (a Python whose math module lost its symbols?)" if not totals else ""
        raise RuntimeError(f"expected {len(names) + 1} callgrind dumps, got {len(totals)}{hint}")
    counted = dict(zip(names, totals[1 : len(names) + 1]))
    if counted[EMPTY] == 0 or any(counted[name] <= counted[EMPTY] for name in names if name != EMPTY):
        raise RuntimeError(
            f"callgrind counted nothing in {COLLECTED_IN} ({counted}): a Python whose _ctypes or math "
            "module lost its symbols (stripped) cannot be counted this way"
        )
    return {name: (total - counted[EMPTY]) / calls for name, total in counted.items() if name != EMPTY}


def start_count(tree: Path, calls: int, folder: Path, cases_from: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    return subprocess.Popen(
        [*valgrind_command(str(folder / "cg.%p")), str(tree), str(HERE), str(calls), cases_from],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_count(process: subprocess.Popen, calls: int, folder: Path, what: str) -> dict[str, float]:
    out, err = process.communicate()
    if process.returncode != 0:
        tail = "\n".join(err.strip().splitlines()[-15:])
        raise RuntimeError(f"{what}: valgrind's run exited {process.returncode}:\n{tail}")
    names = json.loads(out.strip().splitlines()[-1])
    return per_call(names, dump_totals(folder, f"cg.{process.pid}"), calls)


def count(trees: dict[str, Path], calls: int, cases_from: str = CASES_FROM) -> dict[str, dict[str, float]]:
    """label -> case -> instructions per call, for each tree (counted at once, one process each),
    of the cases `cases_from` makes ("module:function", the module found in the tree or here)."""
    with tempfile.TemporaryDirectory(prefix="tc-instructions-") as scratch:
        folders = {label: Path(scratch) / label for label in trees}
        running: dict[str, subprocess.Popen] = {}
        try:
            for label, tree in trees.items():
                folders[label].mkdir()
                running[label] = start_count(tree, calls, folders[label], cases_from)
            return {label: finish_count(process, calls, folders[label], label) for label, process in running.items()}
        finally:  # one count failed (or was interrupted): the others stop too, not left running
            for process in running.values():
                if process.poll() is None:
                    process.kill()
                    process.communicate()


def main(argv=None) -> int:
    args = parse_args(argv)
    if shutil.which("valgrind") is None:
        print("instructions: valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    from small_message import CASES

    trees = {"current": ROOT}
    base_commit = None
    if args.base:
        from compare_revisions import base_worktree

        trees["base"], base_commit = base_worktree(args.base)
    print(f"Counting {args.calls} calls of each case under callgrind ({', '.join(trees)}): a few minutes")
    try:
        counts = count(trees, args.calls)
    except RuntimeError as e:
        print(f"instructions: {e}", file=sys.stderr)
        return 2
    rows = []
    for case in CASES:
        row: dict = {"case": case, "label": CASES[case]}
        for label in trees:
            row[label] = counts[label][case]
            row[f"{label}_ratio"] = counts[label][case] / counts[label]["baseline"]
        if "base" in trees:
            row["current_over_base"] = row["current"] / row["base"]
        rows.append(row)
    print_table(rows, "base" in trees)
    from _results import save

    figures = {"calls": args.calls, "base": args.base, "base_commit": base_commit, "rows": rows}
    save("instructions", BASELINE, figures, args.json)
    return 0


def print_table(rows: list[dict], with_base: bool) -> None:
    print("Instructions per call (thousands; x: over the baseline of the same tree's run)")
    head = f"  {'case':<46}{'current':>16}"
    if with_base:
        head += f"{'base':>16}{'current/base':>14}"
    print(head)
    for row in rows:
        line = f"  {row['label']:<46}{row['current'] / 1e3:>8.1f} {row['current_ratio']:>5.2f}x"
        if with_base:
            line += f"{row['base'] / 1e3:>8.1f} {row['base_ratio']:>5.2f}x{row['current_over_base']:>14.3f}"
        print(line)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
