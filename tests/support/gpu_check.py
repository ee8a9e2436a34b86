"""make gpu-check's context for tests that run its GPU parts on a machine without one, and a small
suite of gpu tests of its own for them to run."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tools.gpu_check.parts import RACE_TEST
from tools.gpu_check.runner import Context


def cpu_context(tmp_path: Path, budget: float = 600) -> Context:
    """The check's context with its GPU parts switched on and every node put on the CPU."""
    (tmp_path / "out").mkdir()
    (tmp_path / "work").mkdir()
    ctx = Context(tmp_path / "out", tmp_path / "work", open(tmp_path / "out" / "gpu-check.log", "w"), budget)
    ctx.cuda, ctx.device = True, "cpu"
    return ctx


def fake_gpu_suite(folder: Path) -> Path:
    """A suite shaped as the project's gpu tests (dataflow tests in two files of tests/e2e/, JPEG
    engines as parameters, the race test, rerun's module), passing where they
    would run, skipped with a reason where they would not. Each test writes the xdist worker that
    ran it into runs/<test>. -> the folder (its pytest.ini registers the markers)."""
    files = {
        "pytest.ini": """
            [pytest]
            markers =
                gpu: needs a CUDA device
                dora: runs a real dora dataflow
        """,
        "conftest.py": """
            import os
            from pathlib import Path
            import pytest

            @pytest.fixture(autouse=True)
            def _record(request):
                runs = Path(__file__).parent / "runs"
                runs.mkdir(exist_ok=True)
                (runs / request.node.name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "main"))
        """,
        "tests/e2e/test_flows.py": f"""
            import pytest
            pytestmark = pytest.mark.gpu

            def test_flow_one(): pass
            def test_flow_two(): pass
            def {RACE_TEST}(): pass
        """,
        "tests/e2e/test_more_flows.py": """
            import pytest

            @pytest.mark.gpu
            @pytest.mark.dora
            def test_a_dataflow_of_jpegs(): pass
        """,
        "tests/nodes/test_jpeg.py": """
            import pytest
            pytestmark = pytest.mark.gpu
            SKIP = pytest.mark.skip(reason="nvimgcodec on cuda: nvImageCodec: not installed")

            @pytest.mark.parametrize("engine", ["torchcodec", "torchvision", pytest.param("nvimgcodec", marks=SKIP)])
            def test_encode(engine): pass

            LOOPS = [("cuda", "torchcodec"), pytest.param("cuda", "nvimgcodec", marks=SKIP)]

            @pytest.mark.parametrize("device, engine", LOOPS)
            def test_loop(device, engine): pass
        """,
        "tests/nodes/test_rerun_sink.py": """
            import pytest

            def test_not_on_the_gpu(): pass  # not marked gpu: not run

            @pytest.mark.gpu
            @pytest.mark.skip(reason="rerun does not import (ModuleNotFoundError: No module named 'rerun')")
            def test_cuda_tensors_are_shown(): pass
        """,
        "tests/nodes/test_more.py": """
            import pytest
            pytestmark = pytest.mark.gpu

            @pytest.mark.parametrize("n", range(6))
            def test_more(n): pass
        """,
    }
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    return folder
