"""bench/jpeg_fps.py: JPEG encoding and decoding throughput of the nodes' engines against PIL. Here
its CPU side (engines alone and the node paths, PIL, the goals); its CUDA side (the GPU sweeps, the
CUDA IPC producer) runs in `make gpu-check`."""

from __future__ import annotations

from tests.support.bench import check_envelope, check_goals, positive, run_script
from tests.support.optional import missing

ENGINE_MODULES = {"torchcodec": "torchcodec", "torchvision": "torchvision.io", "nvimgcodec": "nvidia.nvimgcodec"}


def test_jpeg_fps_measures_every_cpu_engine_here_against_pil(tmp_path):
    """At a tiny size and one round, PIL and each CPU engine that imports here (engine alone and
    node path: accept, dispatch, collect) encode frames and are written as rows with a rate and a
    ratio to PIL; the goals that need CUDA or 4K say they were not measured."""
    data = run_script(
        "jpeg_fps",
        ["--frames", "1", "--sizes", "qvga", "--rounds", "1", "--device", "cpu"],
        tmp_path / "jpeg_fps.json",
    )
    check_envelope(data, "jpeg_fps")
    assert data["rounds"] == 1 and data["device"] is None
    here = sorted(name for name, module in ENGINE_MODULES.items() if missing(module) is None)
    assert "torchvision" in here
    rows = data["rows"]
    assert rows[0]["kind"] == "baseline" and rows[0]["ratio"] == 1.0 and positive(rows[0]["fps"])
    measured = {(r["engine"], r["kind"]) for r in rows[1:]}
    assert measured == {(name, kind) for name in here for kind in ("engine", "node")}
    for row in rows:
        assert (row["size"], row["device"], row["error"]) == ("qvga", "cpu", None), row
        assert positive(row["fps"]) and positive(row["ratio"]), row
    assert set(data["fps"]["qvga"]) == {r["label"] for r in rows}
    check_goals(data["goals"])
    by_name = {g["name"]: g for g in data["goals"]}
    cpu_goal = by_name["qvga CPU node path: torchcodec >= torchvision"]
    assert (cpu_goal["met"] is None) == ("torchcodec" not in here)
    assert [g["met"] for name, g in by_name.items() if name.startswith("4K GPU")] == [None] * 4
    assert {name for name in by_name if name.startswith("4K GPU decode")} == {
        "4K GPU decode node path, best engine: >= 90% of that engine alone",
        "4K GPU decode node path, best engine: >= 3x the best CPU decode node path",
    }
    # decoding, measured as encoding is: each engine alone and through the decoder node's path
    decode = data["decode"]
    assert decode["rows"][0]["kind"] == "baseline" and positive(decode["rows"][0]["fps"])
    assert {(r["engine"], r["kind"]) for r in decode["rows"][1:]} == {
        (name, kind) for name in here for kind in ("engine", "node")
    }
    for row in decode["rows"]:
        assert (row["size"], row["device"], row["error"]) == ("qvga", "cpu", None), row
        assert positive(row["fps"]) and positive(row["ratio"]), row
    # where the encoder node path's main thread spent its time, per row
    for label, breakdown in data["node_path_breakdown"]["qvga"].items():
        assert "node path" in label and set(breakdown["per_frame_us"]) == {
            "receive",
            "accept",
            "dispatch",
            "wait",
            "collect",
        }
