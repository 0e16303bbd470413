"""`rag bench query --json` against the real Postgres and Triton: a tiny run with a 2x scaled store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config.settings import Settings
from tests.conftest import run_cli

pytestmark = pytest.mark.stack

POINT_KEYS = {
    "mode",
    "concurrency",
    "qps",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "n",
    "embed_p50_ms",
    "search_p50_ms",
    "mean_batch",
}


async def test_bench_query_json_has_every_point_and_the_scale_legs(
    ingested: str, settings: Settings, tmp_path: Path
) -> None:
    plot = tmp_path / "bench-query.png"
    args = ["bench", "query", "--json", "--requests", "3", "--repeats", "2", "--concurrency", "1", "--concurrency", "4"]
    result = run_cli(settings, *args, "--scale", "2", "--plot", str(plot), "--out", str(tmp_path / "r.json"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # stdout holds the JSON object only
    assert set(report) >= {"points", "embed_only", "scale", "machine", "params"}
    assert json.loads((tmp_path / "r.json").read_text())["points"] == report["points"]
    assert plot.stat().st_size > 0

    points = {(p["mode"], p["concurrency"]): p for p in report["points"]}
    assert set(points) == {(m, c) for m in ("dense", "full_text", "hybrid") for c in (1, 4)}
    for p in points.values():
        assert set(p) >= POINT_KEYS
        assert p["n"] == 6 and p["runs"] == 2 and p["qps"] > 0  # two rounds of 3
        assert 0 < p["p50_ms"] <= p["p95_ms"] <= p["p99_ms"]
        assert p["search_p50_ms"] > 0
        # every mode embeds the query: full-text search embeds it alongside, for each passage's dense cosine
        assert p["embed_p50_ms"] > 0 and p["mean_batch"] >= 1
    assert [e["concurrency"] for e in report["embed_only"]] == [1, 4]
    assert all(e["qps"] > 0 for e in report["embed_only"])

    scale = report["scale"]
    assert scale["factor"] == 2 and scale["chunks_1x"] > 0
    assert scale["chunks_nx"] == 2 * scale["chunks_1x"]
    assert set(scale["legs"]) == {"dense", "full_text", "hybrid"}
    for leg in scale["legs"].values():
        assert leg["p50_1x_ms"] > 0 and leg["p50_nx_ms"] > 0 and leg["growth"] > 0

    # a second run reuses the complete scaled database
    again = run_cli(settings, *args[:-4], "--concurrency", "1", "--mode", "dense", "--scale", "2")
    assert again.returncode == 0, again.stderr
    assert "reusing" in again.stderr
    assert json.loads(again.stdout)["scale"]["chunks_nx"] == scale["chunks_nx"]
