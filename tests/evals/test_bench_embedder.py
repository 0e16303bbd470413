"""`rag bench embedder` without servers: the replica setup's share against its target, the setups the command
accepts, and the CPU accounting of a load point."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from typer.testing import CliRunner

from agent.cli.main import app
from evals.bench_embedder import SETUPS, BenchParams
from evals.bench_embedder.load import measured_load
from evals.bench_embedder.params import Point
from evals.bench_embedder.report import build_report, replica_target, round_ratios


def test_replica_share_is_reported_as_smallest_and_largest_against_35_to_65_percent() -> None:
    target = replica_target({"endpoints": ["a:1", "b:2"], "served": [30, 70], "share": [0.3, 0.7]})
    assert (target["value"], target["value_max"]) == (0.3, 0.7)
    assert (target["target"], target["target_max"]) == (">= 0.35", "<= 0.65")


def test_replica_setup_runs_only_when_named() -> None:
    assert "triton_replicas" in SETUPS and "triton_replicas" not in BenchParams().setups


def test_unknown_setup_is_a_usage_error_listing_every_setup() -> None:
    result = CliRunner().invoke(app, ["bench", "embedder", "--setup", "bogus"])
    assert result.exit_code == 2
    assert "triton_replicas" in result.output and "'bogus'" in result.output


def test_load_reports_the_cores_the_client_and_the_server_tree_used() -> None:
    server = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    try:

        async def busy_call(text: str) -> object:
            start = time.process_time()
            while time.process_time() - start < 0.02:  # 20 ms of this process's CPU per call
                pass
            return text

        latencies, wall, client, srv = asyncio.run(measured_load(busy_call, ["a", "b"], 10, 2, 600.0, server.pid))
    finally:
        server.kill()
        server.wait()
    assert len(latencies) == 10
    # At least the 10 x 20 ms the calls burned, less one clock tick: the kernel reports a process' CPU time in ticks
    # (10 ms at USER_HZ 100), so the difference of two readings can fall short of the true time by up to one tick.
    assert client * wall >= 0.2 - 0.011
    assert srv is not None and 0.0 <= srv < client  # the sleeping server used (almost) nothing


def _point(setup: str, rps: float, round_index: int, concurrency: int = 32, p99: float = 50.0) -> Point:
    return Point(setup, "short", concurrency, 100, rps, rps, 10.0, 20.0, p99, 2.0, 1.0, round=round_index)


def test_ratios_pair_the_setups_of_each_round_and_report_their_median_spread_and_verdict() -> None:
    points = [
        _point("triton_dynamic", 90.0, 0, p99=80.0),
        _point("ceiling", 100.0, 0, concurrency=16),
        _point("triton_dynamic", 60.0, 1, p99=120.0),
        _point("ceiling", 100.0, 1, concurrency=16),
        _point("triton_dynamic", 80.0, 2, p99=90.0),
        _point("ceiling", 200.0, 2, concurrency=16),
        _point("triton_dynamic", 1000.0, 2, concurrency=8),  # not the headline concurrency
    ]
    assert round_ratios(points, "triton_dynamic", "ceiling") == [0.9, 0.6, 0.4]
    report = build_report(points, BenchParams(repeats=3), {}, {"short": 20.0})
    ceiling = report["targets"]["dynamic_over_ceiling"]
    assert ceiling["value"] == 0.6 and ceiling["verdict"] == "spread crosses target"
    assert ceiling["spread"]["low"] == 0.4 and ceiling["spread"]["high"] == 0.9
    assert report["targets"]["dynamic_p99_ms"]["verdict"] == "spread crosses target"
    assert report["targets"]["dynamic_over_naive"]["value"] is None
    dynamic = report["setups"]["triton_dynamic"]
    assert dynamic["rps"] == 80.0 and dynamic["runs"] == 3 and dynamic["rps_spread"]["low"] == 60.0
