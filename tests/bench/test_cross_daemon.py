"""bench/cross_daemon.py (with bench/_cross_daemon_node.py): tc.send / tc.receive between two dora
daemons against the same-daemon path, on a local cluster (a coordinator and two daemons)."""

from __future__ import annotations

import ipaddress

import pytest

from tests.support.bench import check_envelope, check_goals, load_module, positive, run_script


@pytest.mark.dora
@pytest.mark.slow  # starts a coordinator and two daemons
def test_cross_daemon_measures_both_paths_on_the_loopback_cluster(dora_cli, tmp_path):
    """1 MB, two latency rounds and one throughput run of two messages on the loopback cluster:
    the cluster and its three nodes start, both paths deliver (latency and throughput for the
    same-daemon and the cross-daemon receiver), and the row and the goal are written."""
    args = ["--sizes", "1", "--reps", "2", "--runs", "1", "--count", "2", "--window", "1", "--hosts", "loopback"]
    data = run_script("cross_daemon", args, tmp_path / "cross_daemon.json")
    check_envelope(data, "cross_daemon")
    assert (data["sizes_mb"], data["device"]) == ([1], "cpu") or data["device"] == "cuda"
    [cluster] = data["clusters"]
    assert (cluster["cluster"], cluster["host"], cluster["error"]) == ("loopback", "127.0.0.1", None)
    [row] = cluster["rows"]
    assert (row["size_mb"], row["error"]) == (1, None)
    for key in ("same_p50_ms", "cross_p50_ms", "latency_ratio", "same_mb_s", "cross_mb_s", "throughput_ratio"):
        assert positive(row[key]), (key, row)
    check_goals(data["goals"])


def test_the_host_address_cluster_is_on_a_routable_address_or_skipped(monkeypatch):
    """The `address` cluster's host: an IPv4 address that is not loopback, or None (then the
    script skips that cluster), found without sending a packet."""
    address = load_module("cross_daemon", monkeypatch).routable_address()
    assert address is None or not ipaddress.IPv4Address(address).is_loopback
