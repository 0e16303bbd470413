"""`rag bench embedder` without servers: the replica setup's share against its target, and the setups the command
accepts."""

from __future__ import annotations

from typer.testing import CliRunner

from agent.cli import app
from evals.bench_embedder import SETUPS, BenchParams
from evals.bench_embedder.report import replica_target


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
