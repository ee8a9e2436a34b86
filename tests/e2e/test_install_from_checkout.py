"""The README's install commands for an environment of one's own work from a checkout: `pip
install <checkout>` and `make wheel` + `pip install dist/*.whl` give the library, the nodes, their
manifests and console scripts that answer --help (no index serves dora-tensor-codec)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT, registered_node_scripts

SCRIPTS = tuple(registered_node_scripts().values())  # every node's, from pyproject.toml


def fresh_checkout(dest: Path) -> Path:
    """The files a clone has (tracked and new, nothing ignored): no .venv, build or egg-info."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    )
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def pip(*args: str, cwd: Path) -> None:
    # --no-deps and no build isolation: torch and the rest are this interpreter's already, and
    # the test must not need an index (the README's plain commands fetch what is missing).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--no-deps", "--no-build-isolation", "--no-index", "--quiet"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def check_installed(target: Path, checkout: Path) -> None:
    """Imports come from `target`, not from the checkout; manifests ship; scripts answer --help."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DORA_")}
    env["PYTHONPATH"] = str(target)
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tensor_codec, tensor_codec_nodes, pathlib; p = pathlib.Path(tensor_codec_nodes.__file__).parent; "
            "print(tensor_codec.__file__); print(len(list(p.glob('*/dora-node.yml'))))",
        ],
        cwd=target.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0, where.stderr[-2000:]
    codec_file, manifests = where.stdout.split()
    assert Path(codec_file).is_relative_to(target) and int(manifests) == len(SCRIPTS)
    for script in SCRIPTS:
        assert (target / "bin" / script).exists(), script
    helped = subprocess.run(
        [target / "bin" / "tc-jpeg-decoder", "--help"],
        cwd=target.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert helped.returncode == 0 and helped.stdout.startswith("tc-jpeg-decoder: a dora node"), helped.stderr[-2000:]


def test_the_readme_gives_the_commands_this_test_runs():
    readme = (ROOT / "README.md").read_text()
    for command in (
        "pip install /path/to/dora-tensor-codec",
        "make wheel",
        "pip install dist/dora_tensor_codec-0.1.0-py3-none-any.whl",
    ):
        assert command in readme, command
    assert "pip install dora-tensor-codec" not in readme  # no index serves that name


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the checkout's files")
def test_pip_install_from_a_checkout_and_from_its_wheel(tmp_path):
    checkout = fresh_checkout(tmp_path / "dora-tensor-codec")
    pip("install", "--target", str(tmp_path / "from-checkout"), str(checkout), cwd=tmp_path)
    check_installed(tmp_path / "from-checkout", checkout)

    pip("wheel", "--wheel-dir", str(checkout / "dist"), ".", cwd=checkout)  # what `make wheel` runs
    (wheel,) = (checkout / "dist").glob("*.whl")
    assert wheel.name == "dora_tensor_codec-0.1.0-py3-none-any.whl"
    pip("install", "--target", str(tmp_path / "from-wheel"), str(wheel), cwd=tmp_path)
    check_installed(tmp_path / "from-wheel", checkout)
