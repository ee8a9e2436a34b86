"""Make the project's .venv (`make install` runs this; standard library only).

Two ways, chosen by what the interpreter named by PYTHON already has:

* **fresh**: it has no torch (this development machine's python3). A plain venv is made from it
  and pip installs the project with the torch and torchvision pinned in constraints.txt (or the
  file named by --constraints: `make test-floor` makes .venv-floor with constraints-floor.txt, the
  oldest supported releases; its --fresh makes a fresh venv even over an interpreter with torch).
* **layered**: it already has torch, torchvision and pyarrow of supported releases (a GPU host,
  an NGC container, a conda environment, another venv). .venv is made over it: a .pth file adds
  that interpreter's site directories to .venv's path, so torch is used where it is, and only what
  is missing (dora-rs, dora-rs-cli, ...) goes into .venv. Nothing in that environment changes.
  (Not `--system-site-packages`: a venv made by a venv's python is a venv of the *base*
  interpreter, so that option would show the base's packages and not the ones beside torch.)

Offline (PIP_NO_INDEX=1) nothing is fetched: missing wheels come from WHEELS=dir (pip
--find-links) and the project is built without build isolation, with the setuptools the
environment has. A requirement that cannot be met offline is named with the wheel to bring;
over a preinstalled torch, a runtime requirement the project has a fallback for (FALLBACKS:
torchcodec, whose place torchvision's codecs take) is a warning instead.

Either way pyproject's optional extras (OPTIONAL_EXTRAS: the JPEG nodes' nvImageCodec engine,
rerun-sdk for tc-rerun-sink, matplotlib for `make plots`) are then installed where they can be
had: at the releases constraints.txt pins in a fresh .venv, at the extra's floors over a
preinstalled torch (from WHEELS= offline). One that cannot be had is one
line, never an error: ENGINE=auto does without it.

Either way the development tools (TOOL_EXTRAS: the `lint` extra, ruff and mypy for `make check`;
the `profile` extra, py-spy for `bench/dora_latency.py --profile`) are installed with the project,
the same way and as best-effort: one that cannot be had (an offline GPU host without their wheels)
is one line, and `make check` says how to get it.

Either way the dora-hub nodes that examples/ runs (examples/hub-nodes.txt) are installed after the
project, each as that file says (some with `--no-deps`), with what .venv has of torch, torchvision,
pyarrow, numpy and dora-rs held as constraints. One that cannot be had is a warning: the tests of
its example skip.

The result is recorded in .venv/tc-install.json; a later `make` with the same inputs (pyproject,
constraints, examples/hub-nodes.txt, this file, the interpreter) does nothing, unless something
missing could be had now (a wheel folder named, or an index to ask), or .venv drifted from its pins
(drift: something other than this installer changed a pinned release in .venv, e.g. `uv sync`):
the pinned releases are then put back (layered: .venv's own copy is removed by its RECORD, never
by pip, see remove_own_copies) and the install runs again. A later `make` without
PYTHON= keeps the interpreter .venv was made over.

    python tools/install_env.py [--python PY] [--named] [--wheels DIR] [--venv .venv]
                                [--constraints constraints.txt] [--fresh]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

# Before anything newer is needed, so this line can print (make may run it with an older python3).
if sys.version_info < (3, 11):  # noqa: UP036
    sys.exit(
        f"install: Python {sys.version.split()[0]} runs this; the project needs Python >= 3.11 (dora-rs 1.1): name one "
        "with PYTHON="
    )

import importlib.util  # noqa: E402
import tomllib  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STAMP = "tc-install.json"
# The underlying interpreter's site directories (verify() checks nothing there hides .venv's project).
PTH = "_tc_preinstalled.pth"
PINS = "tc-preinstalled.txt"
PINNED = ("torch", "torchvision", "pyarrow", "numpy")  # never replaced: their builds must match
BUILD_BACKEND = "setuptools>=77"  # as pyproject's [build-system], for builds without isolation
# The pins of a fresh install, relative to ROOT: main's --constraints (make test-floor names
# constraints-floor.txt, the oldest supported releases); read by constraint_pins, install_fresh and
# inputs_digest.
CONSTRAINTS = "constraints.txt"
HUB_NODES = "examples/hub-nodes.txt"  # the dora-hub nodes the examples run, pinned, some to install with --no-deps
HUB_PINS = "tc-hub-pins.txt"  # in .venv: what it has of HUB_KEPT, as constraints for the hub nodes
# A hub node's own pins may not replace these: dora-echo asks numpy<2 (pyarrow then fails to
# import), dora-camera-opencv dora-rs<0.4 (whose nodes cannot talk to a dora 1.1 daemon).
HUB_KEPT = PINNED + ("dora-rs",)
# Runtime requirements the project runs without, and what takes their place: over a preinstalled
# torch (often offline), one that cannot be had is a warning, not an install error.
FALLBACKS = {
    "torchcodec": "the JPEG nodes use torchvision's codecs (ENGINE=auto falls back)",
}
GPU_HOST_WHEELS = "bash ../shared/gpu/wheels.sh"  # brings a wheel to this project's offline GPU hosts
# pyproject's extras installed best-effort after the project, in both ways (never an error), and
# what each is for.
OPTIONAL_EXTRAS = {
    "nvimgcodec": "the JPEG nodes' nvImageCodec engine",
    "rerun": "the tc-rerun-sink node",
    "plots": "make plots",
}
# pyproject's extras of development tools, installed best-effort with the project (install_tools).
TOOL_EXTRAS = {
    "lint": "make check",
    "profile": "bench/dora_latency.py --profile (py-spy, a sampling profiler)",
}
# A requirement met by another distribution of the same module (import cv2).
ALTERNATIVES = {
    "opencv-python-headless": ["opencv-python", "opencv-contrib-python", "opencv-contrib-python-headless"],
}


class InstallError(Exception):
    """Said in one paragraph; `make install` exits 1."""


def _load_versions():
    """tensor_codec/versions.py by path: the same floors as the import check, without torch."""
    spec = importlib.util.spec_from_file_location("_tc_versions", ROOT / "tensor_codec" / "versions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


versions = _load_versions()


# ------------------------------------------------------------------------------------ decisions
def decide(probe: dict, named: bool) -> tuple[str, list[str]]:
    """-> (mode, notes) for an interpreter described by `probe` (see PROBE); raises InstallError.

    A supported torch makes the install layered over it. An unsupported one is an error when the
    interpreter was named (PYTHON=...: the user asked for that torch), and otherwise a note: the
    default interpreter's torch is left alone and .venv gets the pinned releases.
    """
    found = probe["dists"]
    where = f"PYTHON={probe['executable']}"
    if tuple(probe["version"]) < (3, 11):
        raise InstallError(
            f"{where} is Python {'.'.join(map(str, probe['version']))}; the project needs Python >= 3.11 (dora-rs 1.1)"
        )
    if found.get("torch") is None:
        note = f"{where} has no torch (PYTHONPATH is not looked at): .venv gets the pinned torch" if named else None
        return "fresh", [note] if note else []
    heavy = {name: found.get(name) for name in versions.MINIMUM}
    present = {name: v for name, v in heavy.items() if v is not None}
    bad = versions.problems(present)
    if bad:
        if named:
            raise InstallError(
                f"{where} has releases this project does not support:\n  "
                + "\n  ".join(bad)
                + "\nUpgrade them in that environment, or leave PYTHON= out to install the pinned releases into .venv."
            )
        return "fresh", [f"{probe['executable']} has {'; '.join(bad)}: not used, .venv gets the pinned releases"]
    if len(present) < len(heavy) and not named:
        return "fresh", []
    missing = sorted(set(heavy) - set(present))
    notes = [f"{name} is not in {where}: it is installed into .venv" for name in missing]
    return "layered", notes


def pins(probe: dict) -> list[str]:
    """Constraints that keep the preinstalled builds: pip may not replace what torch was built with."""
    return [f"{name}=={probe['dists'][name]}" for name in PINNED if probe["dists"].get(name)]


def requirements() -> list[tuple[str, str]]:
    """(requirement, group) of the project: group "runtime", "fallback" (a runtime requirement
    named in FALLBACKS) or "test"."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = [(r, "fallback" if requirement_name(r) in FALLBACKS else "runtime") for r in project["dependencies"]]
    return runtime + [(r, "test") for r in project.get("optional-dependencies", {}).get("test", [])]


def constraint_pins(path: Path | None = None) -> dict[str, str]:
    """name -> `name==version` for each pin of constraints.txt, or CONSTRAINTS (`#` starts a comment)."""
    path = path or ROOT / CONSTRAINTS
    found = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        text = line.split("#", 1)[0].strip()
        if "==" in text:
            found[requirement_name(text)] = text
    return found


def optional_requirements(mode: str, extra: str | None = None) -> list[str]:
    """pyproject's OPTIONAL_EXTRAS (or the one named) as .venv gets them: in a fresh .venv at the
    release constraints.txt pins (so a new pin installs again), over a preinstalled torch at the
    extra's own floors (what a wheel folder brings; constraints.txt's pins are for the torch it
    pins)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    wanted = [text for name in ([extra] if extra else OPTIONAL_EXTRAS) for text in extras.get(name, [])]
    if mode != "fresh":
        return wanted
    pinned = constraint_pins()
    return [pinned.get(requirement_name(text), text) for text in wanted]


def optional_purpose(text: str) -> str:
    """What an optional requirement is for: its extra's line in OPTIONAL_EXTRAS (or TOOL_EXTRAS)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    name = requirement_name(text)
    for extra, what in {**OPTIONAL_EXTRAS, **TOOL_EXTRAS}.items():
        if any(requirement_name(r) == name for r in extras.get(extra, [])):
            return what
    return "optional"


def requirement_name(text: str) -> str:
    """``"torchvision>=0.26"`` -> ``"torchvision"`` (normalised as pip compares names: `dist_name`)."""
    return dist_name(re.split(r"[\s\[<>=!~;]", text.strip(), maxsplit=1)[0])


def dist_name(text: str) -> str:
    """A distribution's name as pip compares names (PEP 503): `PyYAML`, `rerun_sdk` -> `pyyaml`, `rerun-sdk`."""
    return re.sub(r"[-_.]+", "-", text).lower()


def hub_nodes(path: Path | None = None) -> list[tuple[str, bool]]:
    """(requirement, no_deps) for each node listed in examples/hub-nodes.txt (`name==version`, then
    `--no-deps` or nothing; `#` starts a comment); an absent file lists none. Each must be pinned:
    an example is tested with one release of a node, not whatever the hub publishes next."""
    path = path or ROOT / HUB_NODES
    if not path.exists():
        return []
    nodes = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{path.name} line {number}"
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!-]*", words[0]):
            raise InstallError(f"{where}: expected a hub node pinned as <name>==<version>, got {words[0]!r}")
        if words[1:] not in ([], ["--no-deps"]):
            raise InstallError(
                f"{where}: expected nothing or `--no-deps` after {words[0]}, got {' '.join(words[1:])!r}"
            )
        nodes.append((words[0], words[1:] == ["--no-deps"]))
    return nodes


def wheel_hint(missing: list[str]) -> str:
    names = " ".join(repr(m.split(";")[0].replace(" ", "")) for m in missing)
    return (
        f"Put the wheels in a folder and name it with WHEELS=dir: `pip download --no-deps -d dir {names}` on a "
        "machine with an index (with --python-version and --platform of this one)."
    )


# ------------------------------------------------------------------------------ the interpreter
# Run by another interpreter (`python -c`): what it has of a distribution, or None.
_VERSION_OF = r"""
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
"""

PROBE = (
    _VERSION_OF
    + r"""
import importlib.util, json, os, sys, sysconfig
paths = sysconfig.get_paths()
stdlib = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib")}
def is_stdlib(p):
    real = os.path.realpath(p)
    inside = any(real == s or real.startswith(s + os.sep) for s in stdlib)
    return inside and not any(part in ("site-packages", "dist-packages") for part in real.split(os.sep))
sites = [p for p in sys.path if p and os.path.isdir(p) and not is_stdlib(p)]
print(json.dumps({
    "executable": sys.executable, "version": list(sys.version_info[:3]), "sites": sites,
    "dists": {n: version(n) for n in ("torch", "torchvision", "pyarrow", "numpy", "setuptools", "pip")},
    "has_pip": importlib.util.find_spec("pip") is not None,
}))
"""
)

UNMET = r"""
import json, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version
alternatives = json.loads(sys.argv[2])
unmet = []
for text, group in json.loads(sys.argv[1]):
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate():
        continue
    found = None
    for name in [req.name] + alternatives.get(req.name, []):
        try:
            found = metadata.version(name)
            break
        except metadata.PackageNotFoundError:
            pass
    # A pre-release or local build counts as its release (torch 2.11.0a0+nv is a 2.11).
    release = Version(".".join(map(str, Version(found).release))) if found is not None else None
    if found is None or not req.specifier.contains(release, prereleases=True):
        unmet.append([text, group, found])
print(json.dumps(unmet))
"""


VERSIONS = (
    _VERSION_OF
    + r"""
import json, sys
print(json.dumps({name: version(name) for name in sys.argv[1:]}))
"""
)

SCRIPTS = r"""
import json, sys
from importlib import metadata
names = []
for dist in sys.argv[1:]:
    try:
        names += [e.name for e in metadata.distribution(dist).entry_points if e.group == "console_scripts"]
    except metadata.PackageNotFoundError:
        pass
print(json.dumps(names))
"""


def clean_env() -> dict:
    """The environment for every step: PYTHONPATH would leak into what .venv records. setuptools'
    "Editable installation." warning (11 lines of advice on folders named like the package, at
    every editable build of this checkout) is turned off by its message: it is about nothing here."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONWARNINGS"] = ",".join(filter(None, [env.get("PYTHONWARNINGS"), "ignore:Editable installation"]))
    return env


# What pip prints about the machine's own pip configuration, not about this install: an index
# named there (`extra-index-url = file:///opt/pypi/simple`) that has no page for a package pip
# looks up. A fresh install asks for ~50 packages: ~50 WARNING lines that would bury a real one.
# Counted and said once instead.
_INDEX_WITHOUT_PAGE = re.compile(r"^WARNING: Location '(.*?)' is ignored: it is neither a file nor a directory\.$")


def _shown(lines: Iterable[str], hidden: dict[str, int]) -> Iterator[str]:
    """`lines` less pip's index-without-a-page warnings; `hidden` counts them by index."""
    for line in lines:
        found = _INDEX_WITHOUT_PAGE.match(line.rstrip("\n"))
        if found is None:
            yield line
        else:
            index = found.group(1).rstrip("/").rsplit("/", 1)[0]
            hidden[index] = hidden.get(index, 0) + 1


def run(cmd: list, *, capture: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    args = [str(c) for c in cmd]
    if capture:
        proc = subprocess.run(args, env=clean_env(), text=True, capture_output=True, cwd=ROOT)
    else:
        print("install: $", " ".join(args), flush=True)
        hidden: dict[str, int] = {}
        with subprocess.Popen(
            args, env=clean_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT
        ) as child:
            assert child.stdout is not None
            for line in _shown(child.stdout, hidden):
                print(line, end="", flush=True)
        proc = subprocess.CompletedProcess(args, child.returncode)
        if hidden:
            where, count = ", ".join(sorted(hidden)), sum(hidden.values())
            print(
                f"install: ({count} pip warning{'s' if count != 1 else ''} not shown: this machine's pip "
                f"configuration names package indexes ({where}) without a page for some packages; not about this "
                "install)",
                flush=True,
            )
    if check and proc.returncode != 0:
        detail = f"\n{proc.stderr.strip()[-3000:]}" if capture and proc.stderr else ""
        raise InstallError(f"`{' '.join(args)}` exited with {proc.returncode}{detail}")
    return proc


# A download from the registry can be cut off midway (seen in CI: torch's 530 MB wheel stopped at
# 88 MB through all six of pip's own resume attempts); a fresh attempt opens a new connection.
NETWORK_ATTEMPTS = 3
NETWORK_BACKOFF_S = (15, 60)


LOW_DISK_BYTES = 1 << 30  # after a failed step: less than this free is the likelier cause


def low_disk() -> str | None:
    """Why a failed pip step was more likely the disk than the network (None: there is room)."""
    for where in (ROOT, Path(tempfile.gettempdir())):
        free = shutil.disk_usage(where).free
        if free < LOW_DISK_BYTES:
            return f"the disk holding {where} has {free >> 20} MB free (full?): make room, then run it again"
    return None


def run_downloading(cmd: list) -> subprocess.CompletedProcess:
    """run(cmd) for a pip step that downloads: tried again, twice at most, when it fails online.
    Offline (PIP_NO_INDEX=1) a failure is never the network's, so it is final at once."""
    attempts = 1 if pip_offline() else NETWORK_ATTEMPTS
    for attempt in range(1, attempts + 1):
        proc = run(cmd, check=attempt == attempts)
        if proc.returncode == 0:
            return proc
        low = low_disk()
        if low:  # pip blames the network when the disk is full: say what it is, do not try again
            raise InstallError(f"`{' '.join(map(str, cmd))}` exited with {proc.returncode}: {low}")
        wait = NETWORK_BACKOFF_S[min(attempt, len(NETWORK_BACKOFF_S)) - 1]
        print(
            f"install: that step exited with {proc.returncode} (attempt {attempt} of {attempts}); a download "
            f"may have been cut off, trying again in {wait} s",
            flush=True,
        )
        time.sleep(wait)
    raise AssertionError("unreachable")


def probe_interpreter(python: str) -> dict:
    """What `python` (a path) has; -E: PYTHONPATH is the caller's, not the environment's."""
    if not os.access(python, os.X_OK):
        raise InstallError(f"PYTHON={python}: no such interpreter")
    proc = run([python, "-E", "-c", PROBE], capture=True)
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    probe["executable"] = python  # as named: a venv's python, not its base
    return probe


# ------------------------------------------------------------------------------------- the venv
def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(venv: Path) -> Path:
    proc = run([venv_python(venv), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture=True)
    return Path(proc.stdout.strip())


def pip_offline() -> bool:
    return os.environ.get("PIP_NO_INDEX", "").strip().lower() in ("1", "true", "yes", "on")


def pip_options(wheels: str | None) -> list[str]:
    opts = ["--no-input"]
    if wheels:
        opts += ["--find-links", str(Path(wheels).resolve())]
    if pip_offline():
        opts += ["--no-index", "--no-build-isolation"]
    return opts


def unmet(venv: Path, reqs: list[tuple[str, str]]) -> list[tuple[str, str, str | None]]:
    proc = run([venv_python(venv), "-c", UNMET, json.dumps(reqs), json.dumps(ALTERNATIVES)], capture=True)
    return [tuple(u) for u in json.loads(proc.stdout.strip().splitlines()[-1])]


def ensure_build_backend(venv: Path, wheels: str | None) -> None:
    """Offline there is no build isolation: the project builds with .venv's own setuptools."""
    if not pip_offline() or not unmet(venv, [(BUILD_BACKEND, "build")]):
        return
    proc = run(
        [venv_python(venv), "-m", "pip", "install", "--quiet", *pip_options(wheels), BUILD_BACKEND],
        capture=True,
        check=False,
    )
    if proc.returncode != 0:
        raise InstallError(
            f"building the project offline needs {BUILD_BACKEND} in the environment. " + wheel_hint([BUILD_BACKEND])
        )


# What a fresh .venv takes on disk with torch's CUDA build (measured: 6.0 GB for .venv-floor's
# torch 2.11, 6.7 GB for .venv's torch 2.14 with the extras). Short of it, pip fails midway with
# messages that blame the network ("Connection interrupted ... incomplete-download": what a CI
# run printed when the disk had filled up).
FRESH_VENV_BYTES = 6 << 30


def check_room(venv: Path) -> None:
    """Refuse, before any download, to build torch into `venv` on a disk without room for it."""
    if (venv / "bin" / "python").exists() and any(venv.glob("lib/python*/site-packages/torch/__init__.py")):
        return  # torch is there already: what is left to install is small
    where = venv if venv.exists() else venv.resolve().parent
    free = shutil.disk_usage(where).free
    if free < FRESH_VENV_BYTES:
        raise InstallError(
            f"{venv}: a fresh environment with torch's CUDA build takes about {FRESH_VENV_BYTES >> 30} GB, and the "
            f"disk holding it has {free / (1 << 30):.1f} GB free: make room (old clones, {venv}s of other checkouts, "
            "pip's cache), or install over an interpreter that has torch (make install PYTHON=...)"
        )


def install_fresh(python: str, venv: Path, wheels: str | None) -> None:
    """A plain venv from `python`, the project with its test extra at constraints.txt's pins, then
    the development tools (install_tools)."""
    check_room(venv)
    if not venv_python(venv).exists():
        run([python, "-m", "venv", venv])
    if not pip_offline():
        run_downloading([venv_python(venv), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    ensure_build_backend(venv, wheels)
    run_downloading(
        [
            venv_python(venv),
            "-m",
            "pip",
            "install",
            "--quiet",
            *pip_options(wheels),
            "-c",
            ROOT / CONSTRAINTS,
            "-e",
            ".[test]",
        ]
    )
    install_tools(venv, wheels, "fresh")


def install_layered(probe: dict, venv: Path, wheels: str | None) -> list[str]:
    run([probe["executable"], "-m", "venv", "--without-pip", venv])
    lines = [f"import site; site.addsitedir({site!r})" for site in probe["sites"]]
    (site_packages(venv) / PTH).write_text(
        f"# made by tools/install_env.py: the site directories of {probe['executable']}\n" + "\n".join(lines) + "\n"
    )
    if run([venv_python(venv), "-m", "pip", "--version"], capture=True, check=False).returncode != 0:
        if run([venv_python(venv), "-m", "ensurepip", "--default-pip"], check=False).returncode != 0:
            raise InstallError(
                f"neither {probe['executable']} nor ensurepip provides pip: install pip into that environment"
            )
    (venv / PINS).write_text("\n".join(pins(probe)) + "\n")
    ensure_build_backend(venv, wheels)
    pip = [venv_python(venv), "-m", "pip", "install", "--quiet", *pip_options(wheels), "-c", venv / PINS]
    run([*pip, "--no-deps", "-e", "."])
    missing = install_missing(venv, pip, requirements())
    install_tools(venv, wheels, "layered")
    return missing


def install_tools(venv: Path, wheels: str | None, mode: str) -> list[str]:
    """The TOOL_EXTRAS (ruff and mypy for `make check`, py-spy for profiles) as install_optional
    installs an optional extra: pinned in a fresh .venv, at the extra's floors over a preinstalled
    torch, one line each and never an error (offline GPU hosts may not have their wheels; nothing there needs them).
    -> those that could not be had (not recorded in .venv: a later `make` retries them only when
    an input changes; `make check` names the command that installs them)."""
    reqs = [text for extra in TOOL_EXTRAS for text in optional_requirements(mode, extra)]
    return install_optional(venv, wheels, reqs)


def install_missing(venv: Path, pip: list, reqs: list[tuple[str, str]]) -> list[str]:
    """Install the requirements .venv does not meet yet; -> the test and fallback requirements
    still missing. A requirement whose own dependencies cannot be had offline (dora-rs-cli asks
    for uv, which nothing here runs) is installed without them (never torchvision or pyarrow:
    those must match the torch there); what is still missing after that is an error if the
    project needs it to run, a warning if only tests need it (those tests skip) or if the project
    has a fallback for it (FALLBACKS)."""
    todo = [text for text, _, _ in unmet(venv, reqs)]
    if todo:
        print(f"install: not in the environment yet: {', '.join(todo)}")
    if todo and run([*pip, *todo], capture=True, check=False).returncode != 0:
        for text in todo:
            if run([*pip, text], capture=True, check=False).returncode == 0:
                print(f"install: {text}: installed")
            elif requirement_name(text) in versions.MINIMUM or requirement_name(text) in PINNED:
                print(
                    f"install: {text}: not to be had here with the dependencies it needs (it must match the torch "
                    "there)"
                )
            elif run([*pip, "--no-deps", text], capture=True, check=False).returncode == 0:
                print(f"install: {text}: installed without its own dependencies (some are not to be had here)")
            elif requirement_name(text) in FALLBACKS:
                print(f"install: {text}: not to be had here: {fallback_hint(text)}")
            else:
                print(f"install: {text}: not to be had here")
    still = unmet(venv, reqs)
    runtime = [f"{text} (found {found or 'none'})" for text, group, found in still if group == "runtime"]
    if runtime:
        raise InstallError(
            "missing: " + ", ".join(runtime) + ". " + wheel_hint([t for t, g, _ in still if g == "runtime"])
        )
    return [text for text, _, _ in still]


def fallback_hint(text: str) -> str:
    """What takes the place of a FALLBACKS requirement, and how its wheel comes to a GPU host."""
    name = requirement_name(text)
    return f"{FALLBACKS[name]}; {GPU_HOST_WHEELS} {constraint_pins().get(name, text)} carries it"


def link_dora_cli(probe: dict, venv: Path) -> None:
    """Tests and `make run` look for `dora` beside .venv's python or on PATH; where dora-rs-cli
    came with the preinstalled environment, its command is beside that interpreter."""
    target = venv / "bin" / "dora"
    beside = Path(probe["executable"]).parent / "dora"
    if not target.exists() and not target.is_symlink() and beside.exists():
        target.symlink_to(beside)


def installed_versions(venv: Path, names) -> dict[str, str | None]:
    proc = run([venv_python(venv), "-c", VERSIONS, *names], capture=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_hub_pins(venv: Path) -> Path:
    """Constraints holding what .venv has now of HUB_KEPT (its own or the underlying
    environment's): pip may not change them to meet a hub node's (or an optional package's)
    dependencies."""
    found = installed_versions(venv, HUB_KEPT)
    path = venv / HUB_PINS
    path.write_text("".join(f"{name}=={version}\n" for name, version in found.items() if version))
    return path


def install_hub_nodes(venv: Path, wheels: str | None, nodes: list[tuple[str, bool]]) -> list[str]:
    """Install the hub nodes .venv does not have yet, after the project (so what they need of it is
    already there), under write_hub_pins; -> those that could not be had. Never an error: the
    project is whole without them, and the tests of their examples skip."""
    todo = {text for text, _, _ in unmet(venv, [(text, "hub") for text, _ in nodes])}
    if not todo:
        return []
    pip = [venv_python(venv), "-m", "pip", "install", "--quiet", *pip_options(wheels), "-c", write_hub_pins(venv)]
    missing = []
    for text, no_deps in nodes:
        if text not in todo:
            continue
        proc = run([*pip, *(["--no-deps"] if no_deps else []), text], capture=True, check=False)
        if proc.returncode == 0:
            how = " without its dependencies (--no-deps: see examples/hub-nodes.txt)" if no_deps else ""
            print(f"install: hub node {text}: installed{how}")
            continue
        print(f"install: hub node {text}: not to be had here ({first_error(proc)})")
        missing.append(text)
    return missing


# What pip says when the network, not the package, failed it.
_CUT_OFF = ("incomplete-download", "Connection interrupted", "Read timed out", "ConnectionResetError")
_NO_SPACE = "No space left on device"  # not the network's: trying again cannot help


def cut_off(proc: subprocess.CompletedProcess) -> bool:
    """Whether a pip step that failed was cut off by the network (worth one more try online)."""
    return not pip_offline() and _NO_SPACE not in proc.stderr and any(words in proc.stderr for words in _CUT_OFF)


def first_error(proc: subprocess.CompletedProcess) -> str:
    """The first line of pip's reason for failing: its `ERROR:` (or, for a download, `error:`)
    line, else the first line that is not a warning (pip warns about every find-links location
    it skips before it says anything else)."""
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    errors = (
        [line for line in lines if line.startswith(("ERROR:", "error:"))]
        or [line for line in lines if not line.startswith("WARNING:")]
        or lines
        or ["?"]
    )
    return errors[0][:300]


def install_optional(venv: Path, wheels: str | None, reqs: list[str]) -> list[str]:
    """Install the packages of the optional extras (optional_requirements) that .venv does not have
    yet, each alone, after the project and under write_hub_pins; -> those that could not be had.
    Never an error: the project is whole without them. One line each, installed or why not."""
    todo = {text for text, _, _ in unmet(venv, [(text, "optional") for text in reqs])}
    if not todo:
        return []
    pip = [venv_python(venv), "-m", "pip", "install", "--quiet", *pip_options(wheels), "-c", write_hub_pins(venv)]
    missing = []
    for text in reqs:
        if text not in todo:
            continue
        proc = run([*pip, text], capture=True, check=False)
        if proc.returncode != 0 and cut_off(proc):  # an interrupted download: once more, on a new connection
            time.sleep(NETWORK_BACKOFF_S[0])
            proc = run([*pip, text], capture=True, check=False)
        if proc.returncode == 0:
            print(f"install: optional {text} ({optional_purpose(text)}): installed")
        else:
            print(f"install: optional {text} ({optional_purpose(text)}): not to be had here ({first_error(proc)})")
            missing.append(text)
    return missing


def link_hub_scripts(probe: dict, venv: Path, nodes: list[tuple[str, bool]]) -> None:
    """As link_dora_cli: a hub node the underlying environment already has is not installed again,
    and its command is beside that interpreter, not beside .venv's python where tests look."""
    proc = run([venv_python(venv), "-c", SCRIPTS, *(requirement_name(text) for text, _ in nodes)], capture=True)
    for name in json.loads(proc.stdout.strip().splitlines()[-1]):
        target, beside = venv / "bin" / name, Path(probe["executable"]).parent / name
        if not target.exists() and not target.is_symlink() and beside.exists():
            target.symlink_to(beside)


def verify(venv: Path) -> str:
    """Import everything from outside the checkout (so only what is installed counts) and check
    that the project found is this checkout: a copy installed in the underlying environment
    would otherwise hide it."""
    # torchcodec by its metadata only: the JPEG nodes fall back where it is missing or does not load.
    code = _VERSION_OF + (
        "import dora, pyarrow, torch, torchvision, tensor_codec, tensor_codec_nodes\n"
        "print(tensor_codec.__file__); print(tensor_codec_nodes.__file__)\n"
        'print(f\'torch {torch.__version__}, torchvision {torchvision.__version__}, torchcodec {version("torchcodec") '
        'or "none"}, \'\n'
        '      f\'pyarrow {pyarrow.__version__}, dora-rs {version("dora-rs")}; torch from '
        '{torch.__file__.rsplit("/torch/", 1)[0]}\')\n'
    )
    proc = subprocess.run(
        [str(venv_python(venv)), "-c", code], env=clean_env(), text=True, capture_output=True, cwd=venv
    )
    if proc.returncode != 0:
        raise InstallError(f"{venv_python(venv)} cannot import the project:\n{proc.stderr.strip()[-2000:]}")
    codec_file, nodes_file, summary = proc.stdout.strip().splitlines()[-3:]
    for name, found, here in (
        ("tensor_codec", codec_file, ROOT / "tensor_codec"),
        ("tensor_codec_nodes", nodes_file, ROOT / "nodes"),
    ):
        if not Path(found).resolve().is_relative_to(here.resolve()):
            raise InstallError(
                f"{name} is imported from {found}, not from this checkout ({here}): another copy of dora-tensor-codec "
                "is "
                "installed in the environment .venv is layered over; uninstall it there"
            )
    return summary


# -------------------------------------------------------------------------------------- drift
def drift_pins(venv: Path, mode: str) -> dict[str, str]:
    """name -> release that .venv's own packages must be at: in a fresh .venv the constraints
    file's pins (CONSTRAINTS), in a layered one the builds of the underlying interpreter (PINS: a
    copy of one of those in .venv's own site-packages hides it)."""
    path = ROOT / CONSTRAINTS if mode == "fresh" else venv / PINS
    return {name: text.split("==", 1)[1].strip() for name, text in constraint_pins(path).items()}


def _release_key(version: str) -> tuple:
    """A version as `==` compares it: 2.14 and 2.14.0 alike, case and separators of a suffix ignored."""
    text = version.strip().lower().removeprefix("v")
    match = re.fullmatch(r"(\d+(?:\.\d+)*)(.*)", text)
    if not match:
        return ((), re.sub(r"[._-]", "", text))
    release = [int(part) for part in match.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return (tuple(release), re.sub(r"[._-]", "", match.group(2)))


def matches_pin(pinned: str, found: str) -> bool:
    """Whether release `found` meets the pin `name==pinned`, as pip reads it: a local label
    (2.14.1+cu130) is compared only when the pin names one."""
    pinned_public, _, pinned_local = pinned.partition("+")
    found_public, _, found_local = found.partition("+")
    if _release_key(pinned_public) != _release_key(found_public):
        return False
    return not pinned_local or pinned_local.lower() == found_local.lower()


def dist_infos(site: Path) -> Iterator[tuple[str, str, Path]]:
    """(name as dist_name gives it, release, folder) for each `*.dist-info` folder in one
    site-packages folder; the release is its METADATA's `Version:`, else the folder's name. Plain
    file reads: importlib.metadata's import alone costs more than a warm `make install` otherwise takes."""
    for entry in os.scandir(site) if site.is_dir() else []:
        if not entry.name.endswith(".dist-info") or "-" not in entry.name:
            continue
        name, _, version = entry.name.removesuffix(".dist-info").partition("-")
        try:
            with open(os.path.join(entry.path, "METADATA"), encoding="utf-8", errors="replace") as meta:
                for line in meta:
                    if line.startswith("Version:"):
                        version = line.split(":", 1)[1].strip()
                        break
                    if not line.strip():  # the headers end
                        break
        except OSError:
            pass
        yield dist_name(name), version, Path(entry.path)


def installed_releases(site: Path) -> dict[str, list[str]]:
    """name -> the releases installed in one site-packages folder (dist_infos)."""
    found: dict[str, list[str]] = {}
    for name, release, _ in dist_infos(site):
        found.setdefault(name, []).append(release)
    return found


def own_site_packages(venv: Path) -> list[Path]:
    """.venv's own site-packages folders: what drift compares and repair_drift removes from (never
    the folders of an environment it is layered over, which its .pth file adds)."""
    return sorted(venv.glob("lib/python*/site-packages"))


def drift(venv: Path, pinned: dict[str, str]) -> list[tuple[str, str, str]]:
    """(name, pinned, found) for each package of `pinned` that .venv's own site-packages holds at
    another release. What an underlying environment provides (layered) is not looked at: it is not
    .venv's, and this installer never changes it. Read from the packages' metadata on disk, in
    this process: no interpreter is started (a warm `make install` runs before every target)."""
    installed: dict[str, list[str]] = {}
    for site in own_site_packages(venv):
        for name, releases in installed_releases(site).items():
            installed.setdefault(name, []).extend(releases)
    return [
        (name, version, release)
        for name, version in pinned.items()
        for release in installed.get(dist_name(name), [])
        if not matches_pin(version, release)
    ]


def drift_message(venv: Path, mode: str, drifted: list[tuple[str, str, str]]) -> str:
    """One line: what drifted (name, pinned, found) and what is done about it."""
    source = CONSTRAINTS if mode == "fresh" else f"the interpreter {venv.name} is layered over"
    what = "; ".join(f"{name} {found} (pinned {pinned})" for name, pinned, found in drifted)
    fix = (
        "putting the pinned releases back"
        if mode == "fresh"
        else f"removing {venv.name}'s copies (the underlying environment's builds are used)"
    )
    return (
        f"install: {venv.name} drifted from {source}: {what}; changed by something other than make install "
        f"(uv sync?): {fix}"
    )


def repair_drift(venv: Path, wheels: str | None, mode: str, drifted: list[tuple[str, str, str]]) -> None:
    """Put the pins back: in a fresh .venv pip installs the pinned releases under the constraints
    file (from WHEELS= offline; what a pinned torch pins, triton, comes back with it); in a layered
    one .venv's own copies are removed (remove_own_copies), so the underlying environment's builds
    show again."""
    if mode != "fresh":
        remove_own_copies(venv, drifted)
        return
    python = venv_python(venv)
    wanted = [f"{name}=={pinned}" for name, pinned, _ in drifted]
    try:
        run_downloading(
            [python, "-m", "pip", "install", "--quiet", *pip_options(wheels), "-c", ROOT / CONSTRAINTS, *wanted]
        )
    except InstallError as e:
        raise InstallError(f"{e}\n{wheel_hint(wanted)}") from None


class NotRemovable(Exception):
    """Why .venv's copy of a distribution is not removed (nothing of it is)."""


# Not `pip uninstall`: pip takes a distribution as its environment's when its folder's path starts
# with sys.prefix as a string, so an environment at .venv-floor counts as inside .venv, and where
# .venv's own dist-info cannot be read pip finds the underlying copy by name and removes that.
def remove_own_copies(venv: Path, drifted: list[tuple[str, str, str]]) -> None:
    """Remove .venv's own copy of each (name, pinned, found) of `drifted`: exactly the files its
    RECORD lists, each checked to lie inside .venv, then its dist-info folder. Every copy is
    checked before anything is removed: where one cannot be (no RECORD, a malformed one, a file
    outside .venv), nothing is, and InstallError says how to make .venv again."""
    root = venv.resolve()
    try:
        plans = [removal_plan(root, info) for name, _, found in drifted for info in own_copies(venv, name, found)]
    except NotRemovable as e:
        raise InstallError(not_removable_advice(venv, str(e))) from None
    for info, files in plans:
        try:
            remove_planned(info, files)
        except OSError as e:
            raise InstallError(
                f"removing {venv.name}'s copy {info.name} stopped: {e}. Nothing outside {venv.name} was touched; its "
                f"record is left until the rest is gone, so the next make tries again"
            ) from None


def own_copies(venv: Path, name: str, release: str) -> list[Path]:
    """The dist-info folders of `name` at `release` in .venv's own site-packages."""
    return [
        info
        for site in own_site_packages(venv)
        for found, version, info in dist_infos(site)
        if found == dist_name(name) and version == release
    ]


def not_removable_advice(venv: Path, why: str) -> str:
    """InstallError's text for a copy that is not removed: why, and the commands that make .venv again."""
    stamp = read_stamp(venv)
    python = stamp["python"] if stamp else "<the interpreter it is layered over>"
    return (
        f"{why}. Nothing was removed; {venv.name}'s copy is not guessed at (it hides the build of the environment "
        f"it is layered over). Make {venv.name} again: `rm -rf {venv}` then `make install PYTHON={python}`"
    )


def removal_plan(root: Path, info: Path) -> tuple[Path, list[Path]]:
    """(dist-info folder, every other entry to remove) for the copy whose dist-info is `info`, in a
    .venv resolved to `root`: what its RECORD lists outside the dist-info folder, as located_inside
    gives it, and what Python compiled of its `.py` files; NotRemovable where any of it is not
    provably inside."""
    site = info.parent.resolve()
    if not site.is_relative_to(root):
        raise NotRemovable(f"{info.parent} lies outside {root} (a link)")
    if info.is_symlink() or not info.is_dir():
        raise NotRemovable(f"{info} is not a folder of {root.name} (a link, or not a folder)")
    own = site / info.name
    listed = [located_inside(root, site / path, f"{info.name}/RECORD lists {path!r}") for path in record(info)]
    files = [path for path in listed if not path.is_relative_to(own)]
    return own, files + [pyc for path in files for pyc in compiled_copies(path)]


def record(info: Path) -> list[str]:
    """The paths a dist-info's RECORD lists (CSV rows: path, hash, size); NotRemovable naming the
    folder where it is absent, unreadable, not a plain file or not such rows."""
    path = info / "RECORD"
    try:
        if path.is_symlink() or not path.is_file():  # a link leads anywhere, a pipe would hang the read
            raise NotRemovable(f"{info} has no RECORD as a plain file (the list of the files it installed)")
        with open(path, encoding="utf-8", newline="") as f:
            rows = [row for row in csv.reader(f) if row]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise NotRemovable(f"{path} cannot be read ({e})") from None
    for number, row in enumerate(rows, 1):
        if len(row) != 3 or not row[0].strip():
            raise NotRemovable(f"{path} row {number}: expected `path,hash,size`, got {','.join(row)[:200]!r}")
    if not rows:
        raise NotRemovable(f"{path} lists no files")
    return [row[0] for row in rows]


def located_inside(root: Path, path: Path, what: str) -> Path:
    """Where the folder entry `path` lies: its folder resolved (links, `..`), its own name kept, so a
    link is removed as a link and never what it points at; NotRemovable, saying `what`, unless that
    is inside `root` (a resolved folder; compared by path parts, never as a string prefix)."""
    if path.name in ("", ".", ".."):
        raise NotRemovable(f"{what}: not a file")
    try:
        place = path.parent.resolve() / path.name
    except (OSError, ValueError, RuntimeError) as e:  # a link loop, a NUL in the name
        raise NotRemovable(f"{what}: {e}") from None
    if place == root or not place.is_relative_to(root):
        raise NotRemovable(f"{what}, which is not inside {root}")
    return place


def compiled_copies(path: Path) -> list[Path]:
    """The `__pycache__/<name>.*.pyc` files beside a `.py` that located_inside placed (compiled
    after the install, its RECORD may not list them); none where `__pycache__` is a link."""
    cache = path.parent / "__pycache__"
    if path.suffix != ".py" or cache.is_symlink() or not cache.is_dir():
        return []
    return sorted(cache.glob(f"{path.stem}.*.pyc"))


def remove_planned(info: Path, files: list[Path]) -> None:
    """Remove `files` (links as links), then the dist-info folder `info` last (a removal cut short
    keeps its RECORD, so the next make finds the drift and finishes it), then the folders this
    left empty inside its site-packages."""
    emptied = {info.parent}
    for path in files:
        if path.is_symlink() or path.is_file():
            path.unlink()
            emptied.add(path.parent)
        elif path.is_dir():  # a RECORD may name a folder: removed below if left empty
            emptied.add(path)
    shutil.rmtree(info)
    prune_empty(info.parent, emptied)


def prune_empty(site: Path, folders: set[Path]) -> None:
    """Remove each of `folders`, and their parents, that is left empty strictly inside `site`."""
    inside = {parent for folder in folders for parent in (folder, *folder.parents) if parent.is_relative_to(site)}
    for folder in sorted(inside - {site}, key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()  # only an empty folder
        except OSError:
            pass


# --------------------------------------------------------------------------------------- main
def inputs_digest() -> str:
    h = hashlib.sha256()
    for name in ("pyproject.toml", CONSTRAINTS, HUB_NODES, "tools/install_env.py"):
        path = ROOT / name
        h.update(path.read_bytes() if path.exists() else b"")  # hub-nodes.txt may be left out
    return h.hexdigest()[:16]


def read_stamp(venv: Path) -> dict | None:
    try:
        return json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        return None


def which_outside(python: str, venv: Path) -> str | None:
    """`python` as the shell finds it, skipping .venv/bin: make puts .venv/bin first on PATH, and
    the default `python3` must name the interpreter .venv is made from, not .venv's own."""
    if os.sep in python:
        return os.path.abspath(python) if os.access(python, os.X_OK) else None
    dirs = [
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and Path(d).resolve() != (venv / "bin").resolve()
    ]
    found = shutil.which(python, path=os.pathsep.join(dirs))
    return os.path.abspath(found) if found else None


def must_rebuild(venv: Path, stamp: dict | None, mode: str, python: str) -> bool:
    """Start .venv over when it was made another way or over another interpreter. A .venv from
    before this installer (no record, no layering file) is reused for a fresh install, as `make`
    always did; one left by a layered attempt that failed is not."""
    if not venv.exists():
        return False
    if stamp is None:
        return mode == "layered" or any(venv.glob(f"lib/python*/site-packages/{PTH}"))
    return stamp["mode"] != mode or stamp["python"] != python


def up_to_date(stamp: dict | None, digest: str, python: str, venv: Path, wheels: str | None) -> bool:
    """Nothing to do: same inputs, same interpreter, and nothing missing that could be had now
    (a wheel folder named, or an index to ask)."""
    if not stamp or stamp["digest"] != digest or stamp["python"] != python or not venv_python(venv).exists():
        return False
    return not (stamp.get("missing") or stamp.get("optional_missing")) or not (wheels or not pip_offline())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="python3", help="the interpreter to build on (make's PYTHON)")
    parser.add_argument("--named", action="store_true", help="PYTHON was given explicitly (make PYTHON=...)")
    parser.add_argument("--wheels", default=None, help="a folder of wheels for pip --find-links (make's WHEELS)")
    parser.add_argument("--venv", default=".venv")
    parser.add_argument(
        "--constraints", default="constraints.txt", help="the pins of a fresh install (relative to the checkout)"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="a fresh venv at the constraints' pins even over an interpreter with a supported torch (make test-floor)",
    )
    args = parser.parse_args(argv)
    global CONSTRAINTS
    CONSTRAINTS = args.constraints
    if not (ROOT / CONSTRAINTS).is_file():
        print(f"install: FAILED: no constraints file {ROOT / CONSTRAINTS}", file=sys.stderr)
        return 1
    venv = (ROOT / args.venv).resolve()
    digest, stamp = inputs_digest(), read_stamp(venv)
    if stamp and not args.named:
        wanted, named = stamp["python"], stamp["named"]  # keep what .venv was made over
    else:
        wanted, named = which_outside(args.python, venv) or args.python, args.named
    drifted: list[tuple[str, str, str]] = []
    if up_to_date(stamp, digest, wanted, venv, args.wheels):
        # The same inputs: what .venv has of its pins can only have changed behind make's back.
        drifted = drift(venv, drift_pins(venv, stamp["mode"]))
        if not drifted:
            return 0
        print(drift_message(venv, stamp["mode"], drifted), flush=True)
    try:
        probe = probe_interpreter(wanted)
        if args.fresh:  # the releases CONSTRAINTS pins are wanted, whatever torch the interpreter has
            mode, notes = decide({**probe, "dists": {}}, False)  # its Python version is checked, nothing else
            if probe["dists"].get("torch"):
                there = f"torch {probe['dists']['torch']} of {probe['executable']}"
                notes = [f"{there} not used (--fresh): {venv.name} gets the releases {CONSTRAINTS} pins"]
        else:
            mode, notes = decide(probe, named)
        hub = hub_nodes()  # a malformed list fails before anything is changed
        if must_rebuild(venv, stamp, mode, probe["executable"]):
            if not (venv / "pyvenv.cfg").exists():
                raise InstallError(f"{venv} exists and is not a virtual environment: move it away")
            if Path(sys.prefix).resolve() == venv:  # make ran this with .venv's python: not from a tree being removed
                script = str(Path(__file__).resolve())
                os.execv(probe["executable"], [probe["executable"], script, *(sys.argv[1:] if argv is None else argv)])
            print(f"install: making {venv.name} again ({mode} over {probe['executable']})")
            shutil.rmtree(venv)
        for note in notes:
            print(f"install: {note}")
        if drifted and venv.exists():  # not made again: the pins first, then the install as usual
            repair_drift(venv, args.wheels, stamp["mode"], drifted)
        missing: list[str] = []
        if mode == "layered":
            print(f"install: using torch {probe['dists']['torch']} of {probe['executable']} (.venv is layered over it)")
            missing = install_layered(probe, venv, args.wheels)
            link_dora_cli(probe, venv)
        else:
            install_fresh(probe["executable"], venv, args.wheels)
        optional_missing = install_optional(venv, args.wheels, optional_requirements(mode))
        hub_missing = install_hub_nodes(venv, args.wheels, hub)
        if mode == "layered":
            link_hub_scripts(probe, venv, hub)
        summary = verify(venv)  # after the hub nodes: everything still imports
    except InstallError as e:
        print(f"install: FAILED: {e}", file=sys.stderr)
        return 1
    for text in missing:
        if requirement_name(text) in FALLBACKS:
            print(
                f"install: warning: {text} is missing: {FALLBACKS[requirement_name(text)]} (a later make with WHEELS= "
                "retries)"
            )
        else:
            print(
                f"install: warning: test requirement {text} is missing: the tests that need it skip (a later make with "
                "WHEELS= retries)"
            )
    for text in hub_missing:
        print(
            f"install: warning: hub node {text} is missing: its example's tests skip (a later make with WHEELS= "
            "retries)"
        )
    # Hub nodes are recorded with the missing test requirements, the optional packages beside
    # them: up_to_date retries them alike.
    record = {
        "mode": mode,
        "python": probe["executable"],
        "named": named,
        "digest": digest,
        "constraints": CONSTRAINTS,
        "dists": probe["dists"],
        "missing": missing + hub_missing,
        "optional_missing": optional_missing,
    }
    (venv / STAMP).write_text(json.dumps(record, indent=1) + "\n")
    print(f"install: {venv.name} ready ({mode}): {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
