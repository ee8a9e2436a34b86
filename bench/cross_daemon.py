"""Across daemons: tc.send / tc.receive between machine ids A and B against the same-daemon path,
measured in the same run (issue 6). Goal: cross-daemon throughput within 2x of same-daemon host
bytes.

A coordinator and two daemons run on this host (tools.local_cluster). A sender on A
has two outputs: `local` to a receiver on A (same daemon: dora's shared memory) and `remote` to a
receiver on B (another daemon). Per size, the two take turns: latency p50 with one message in
flight (acked), then throughput of a stream of COUNT messages with WINDOW in flight (acked; MB/s
from the first send to the last ack; median of the runs).

Two clusters, one after the other:
* `loopback`: everything on 127.0.0.1, as `make run-cluster`. dora will not advertise a loopback
  address to another machine, so it relays every output with a consumer on another daemon
  through the daemons (and caps those messages at 64 MiB encoded).
* `host address`: the same on this host's routable address (when it has one): nodes on
  different daemons connect directly, as they do between real machines.

With CUDA, the sender's tensors live on the GPU and receivers restore onto theirs (`--device`),
so both paths include the GPU->host copy and the host->GPU restore (TRANSPORT stays host here:
CUDA IPC is measured by bench/cuda_ipc.py).

    python bench/cross_daemon.py [--sizes 1,4,16,56,64] [--reps 8] [--runs 3] [--count 10] [--window 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _goals import goal  # noqa: E402
from _results import add_json_option, save  # noqa: E402

from tools.local_cluster import LOOPBACK, ClusterError, LocalCluster  # noqa: E402

BASELINE = "the same-daemon path of the same sender, measured in turns with it"
GOAL_RATIO = 2.0  # same-daemon over cross-daemon throughput


def routable_address() -> str | None:
    """This host's address on its default route (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.123", 9))  # TEST-NET: only the routing table is consulted
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def flow(tmp: Path, plan: dict, device: str) -> Path:
    node = str(HERE / "_cross_daemon_node.py")
    env = {"PYTHONPATH": str(ROOT), "TC_TRANSPORT": "host"}

    def entry(node_id, machine, role, **extra):
        return {
            "id": node_id,
            "path": node,
            "deploy": {"machine": machine, "working_dir": str(tmp)},
            "env": {**env, "ROLE": role, "DEVICE": device},
            **extra,
        }

    nodes = [
        entry(
            "sender",
            "A",
            "sender",
            outputs=["local", "remote"],
            shared_memory_pool_size="512MB",
            inputs={
                "ack_local": {"source": "recv-a/ack", "queue_size": 64},
                "ack_remote": {"source": "recv-b/ack", "queue_size": 64},
            },
        ),
        entry("recv-a", "A", "receiver", inputs={"x": {"source": "sender/local", "queue_size": 16}}, outputs=["ack"]),
        entry("recv-b", "B", "receiver", inputs={"x": {"source": "sender/remote", "queue_size": 16}}, outputs=["ack"]),
    ]
    nodes[0]["env"]["PLAN"] = json.dumps(plan)
    path = tmp / "cross-daemon.yml"
    path.write_text(json.dumps({"nodes": nodes}, indent=1))
    return path


def measure(host: str, plan: dict, device: str) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="tc-cross-daemon-") as name:
        tmp = Path(name)
        plan = dict(plan, results=str(tmp / "results.json"))
        path = flow(tmp, plan, device)
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join(
            [str(Path(sys.executable).parent), env.get("PATH", "")]
        )  # dora runs .py nodes with `python`
        env["UV_NO_PROJECT"] = "1"
        with LocalCluster(["A", "B"], tmp / "logs", env=env, host=host) as cluster:
            result = cluster.start_dataflow(path, timeout_s=900, log=tmp / "dataflow.log")
        results = tmp / "results.json"
        if result.returncode != 0 or not results.exists():
            sys.exit(f"cross-daemon bench on {host} failed (exit {result.returncode}):\n{result.stdout[-4000:]}")
        return json.loads(results.read_text())


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def report(label: str, rows: list[dict]) -> list[dict]:
    """Prints one cluster's table; -> its rows as written to the results (one per size)."""
    print(f"\n{label}")
    print(
        f"{'size':>6} | {'same-daemon p50':>15} {'cross p50':>10} {'ratio':>6} | {'same MB/s':>9} {'cross MB/s':>10} "
        f"{'same/cross':>10} | 2x goal"
    )
    out = []
    for row in rows:
        local, remote = row["local"], row["remote"]
        lat_l, lat_r = median(local["latency_ms"]), median(remote["latency_ms"])
        thr_l, thr_r = median(local["throughput_mb_s"]), median(remote["throughput_mb_s"])
        error = remote["error"] or local["error"] or None
        if error:
            print(
                f"{row['size_mb']:>4}MB | {fmt(lat_l, 'ms'):>15} {'-':>10} {'-':>6} | {fmt(thr_l):>9} {'-':>10} "
                f"{'-':>10} | refused: {error}"
            )
            lat_r = thr_r = None
        lat_ratio = lat_r / lat_l if lat_l and lat_r else None
        thr_ratio = thr_l / thr_r if thr_l and thr_r else None
        verdict = "-" if thr_ratio is None else ("met" if thr_ratio <= GOAL_RATIO else "NOT met")
        if not error:
            print(
                f"{row['size_mb']:>4}MB | {fmt(lat_l, 'ms'):>15} {fmt(lat_r, 'ms'):>10} {fmt(lat_ratio, 'x'):>6} | "
                f"{fmt(thr_l):>9} {fmt(thr_r):>10} {fmt(thr_ratio, 'x'):>10} | {verdict}"
            )
        out.append(
            {
                "size_mb": row["size_mb"],
                "same_p50_ms": lat_l,
                "cross_p50_ms": lat_r,
                "latency_ratio": lat_ratio,
                "same_mb_s": thr_l,
                "cross_mb_s": thr_r,
                "throughput_ratio": thr_ratio,
                "error": error,
            }
        )
    return out


def fmt(value, unit: str = "") -> str:
    if value is None:
        return "lost"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "ms":
        return f"{value:.2f}"
    return f"{value:.0f}"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,16,56,64", help="MB (MiB), comma-separated")
    parser.add_argument("--reps", type=int, default=8, help="latency rounds per size and path")
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per size and path")
    parser.add_argument("--count", type=int, default=10, help="messages per throughput run")
    parser.add_argument("--window", type=int, default=3, help="messages in flight in a throughput run")
    parser.add_argument(
        "--device", default=None, help="where tensors live and are restored (default: cuda if present, else cpu)"
    )
    parser.add_argument("--hosts", default="loopback,address", help="which clusters: loopback, address")
    add_json_option(parser, "cross_daemon")
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    plan = {
        "sizes_mb": [int(s) for s in args.sizes.split(",")],
        "reps": args.reps,
        "runs": args.runs,
        "count": args.count,
        "window": args.window,
        "device": device,
    }
    print(
        f"cross-daemon bench: tensors on {device}, host bytes; latency p50 of {args.reps} one-at-a-time messages; "
        f"throughput median of {args.runs} runs of {args.count} messages, {args.window} in flight"
    )
    wanted = args.hosts.split(",")
    clusters = []
    if "loopback" in wanted:
        clusters.append(
            (f"loopback cluster ({LOOPBACK}): dora relays cross-daemon outputs through its daemons", LOOPBACK)
        )
    if "address" in wanted:
        address = routable_address()
        if address is None:
            print("\n(no routable address on this host: the host-address cluster is skipped)")
        else:
            clusters.append((f"host-address cluster ({address}): nodes on different daemons connect directly", address))
    results, goals = [], []
    for label, host in clusters:
        name = "loopback" if host == LOOPBACK else "host address"
        try:
            rows = measure(host, plan, device)
        except ClusterError as e:
            print(f"\n{label}: could not start: {e}")
            results.append({"cluster": name, "host": host, "error": str(e), "rows": []})
            continue
        rows = report(label, rows)
        results.append({"cluster": name, "host": host, "error": None, "rows": rows})
        goals += [
            goal(
                f"{name} cluster, {r['size_mb']} MB: cross-daemon throughput within {GOAL_RATIO:g}x of same-daemon",
                r["throughput_ratio"],
                "<=",
                GOAL_RATIO,
                "x",
                f"same/cross {r['throughput_ratio']:.2f}x",
            )
            for r in rows
            if r["throughput_ratio"] is not None
        ]
    print(
        "\n(ratio columns: cross-daemon over same-daemon latency, same-daemon over cross-daemon throughput; goal: "
        "throughput "
        "ratio <= 2. 'lost': a message or its ack did not arrive within 10 s, dora dropped it)"
    )
    figures = {**plan, "goal_ratio": GOAL_RATIO, "clusters": results, "goals": goals}
    return save("cross_daemon", BASELINE, figures, args.json)


if __name__ == "__main__":
    main()
