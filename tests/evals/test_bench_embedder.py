"""`rag bench embedder` without servers: the replica setup's share against its target, the setups the command
accepts, and the CPU accounting of a load point."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

from typer.testing import CliRunner

from agent.cli.main import app
from evals.bench_embedder import SETUPS, BenchParams
from evals.bench_embedder.load import measured_load
from evals.bench_embedder.params import Point
from evals.bench_embedder.profile import Variant, backend_overhead, stats_delta, variant_config
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


def _stats(
    success: int, executions: int, inferences: int, queue_ns: int, batches: dict[int, tuple[int, int]]
) -> dict[str, Any]:
    return {
        "execution_count": executions,
        "inference_count": inferences,
        "inference_stats": {
            "success": {"count": success, "ns": 0},
            "queue": {"count": success, "ns": queue_ns},
            "compute_infer": {"count": success, "ns": 0},
        },
        "batch_stats": [
            {"batch_size": size, "compute_infer": {"count": count, "ns": ns}} for size, (count, ns) in batches.items()
        ],
    }


def test_the_profile_takes_the_difference_of_two_statistics_snapshots_per_request_and_per_batch_size() -> None:
    before = _stats(10, 6, 10, 50_000_000, {1: (4, 40_000_000), 2: (2, 30_000_000)})
    after = _stats(40, 16, 40, 350_000_000, {1: (6, 60_000_000), 2: (2, 30_000_000), 4: (7, 210_000_000)})
    delta = stats_delta(before, after)
    assert (delta["requests"], delta["executions"], delta["mean_batch"]) == (30, 10, 3.0)
    assert delta["queue_ms"] == 10.0  # 300 ms of queue over 30 requests
    assert delta["per_batch"] == {
        1: {"executions": 2, "compute_infer_ms": 10.0},
        4: {"executions": 7, "compute_infer_ms": 30.0},
    }
    overhead = backend_overhead(delta, {1: 4.0, 4: 25.0})
    assert overhead[1]["overhead_ms"] == 6.0 and overhead[4]["overhead_ms"] == 5.0


def test_a_variant_replaces_instances_threads_and_batcher_and_keeps_the_rest() -> None:
    base = {"name": "m", "max_batch_size": 64, "dynamic_batching": {"max_queue_delay_microseconds": "2000"},
            "parameters": {"nice": {"string_value": "10"}}, "instance_group": [{"count": 1}]}  # fmt: skip
    config = variant_config(base, Variant(instances=2, threads=1, queue_delay_us=500, preferred=(8, 16)))
    assert config["instance_group"] == [{"count": 2}] and config["max_batch_size"] == 64
    assert config["parameters"]["intra_op_thread_count"] == {"string_value": "1"} and "nice" not in config["parameters"]
    assert config["dynamic_batching"] == {"max_queue_delay_microseconds": "500", "preferred_batch_size": [8, 16]}
    assert "dynamic_batching" not in variant_config(base, Variant(queue_delay_us=None))
    assert base["instance_group"] == [{"count": 1}]  # not modified
    assert Variant().label == "1x2 thr, delay 2000 us, in-flight 8"
