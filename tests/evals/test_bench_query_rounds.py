"""`rag bench query` over rounds: medians with spread per point, ratios paired within a round, and the targets
(hybrid vs embed-only at 32, restricted vs unrestricted) judged by every round."""

from __future__ import annotations

from typing import Any

from evals.bench_query_rounds import merge_embed_only, merge_points, query_targets, restricted_ratios


def _point(mode: str, concurrency: int, round_index: int, qps: float, p50: float = 10.0) -> dict[str, Any]:
    return {
        "mode": mode,
        "concurrency": concurrency,
        "round": round_index,
        "qps": qps,
        "p50_ms": p50,
        "p95_ms": 2 * p50,
        "p99_ms": 3 * p50,
        "n": 10,
        "embed_p50_ms": 1.0,
        "search_p50_ms": 2.0,
        "mean_batch": None,
    }


EMBED = [{"concurrency": 32, "round": r, "qps": q} for r, q in enumerate((100.0, 200.0, 100.0))]


def test_a_point_is_the_median_of_its_rounds_and_its_ratio_is_paired_within_each_round() -> None:
    points = [_point("hybrid", 32, r, q) for r, q in enumerate((80.0, 60.0, 50.0))]
    (merged,) = merge_points(points, EMBED)
    assert merged["qps"] == 60.0 and merged["n"] == 30 and merged["runs"] == 3
    assert merged["qps_spread"]["low"] == 50.0 and merged["qps_spread"]["high"] == 80.0
    # 80/100, 60/200, 50/100: paired per round, not the ratio of the medians (60/100)
    assert merged["embed_only_ratio_spread"]["values"] == [0.8, 0.3, 0.5]
    assert merged["embed_only_ratio"] == 0.5
    assert merged["mean_batch"] is None
    (embed,) = merge_embed_only(EMBED)
    assert embed == {
        "concurrency": 32,
        "qps": 100.0,
        "runs": 3,
        "qps_spread": {"median": 100.0, "low": 100.0, "high": 200.0, "relative": 1.0, "values": [100.0, 200.0, 100.0]},
    }


def test_the_hybrid_target_is_judged_by_every_round() -> None:
    points = [_point("hybrid", 32, r, q) for r, q in enumerate((80.0, 160.0, 90.0))]
    targets = query_targets(points, EMBED)
    assert targets["hybrid_over_embed_only_c32"]["verdict"] == "met"
    assert targets["hybrid_p50_ms_c1"]["value"] is None
    assert "restricted_over_unrestricted_p50" not in targets
    slow = [_point("hybrid", 32, r, q) for r, q in enumerate((80.0, 100.0, 60.0))]
    assert query_targets(slow, EMBED)["hybrid_over_embed_only_c32"]["verdict"] == "spread crosses target"


def test_restricted_latency_is_compared_with_the_unrestricted_point_of_the_same_round() -> None:
    plain = [_point("hybrid", 1, r, 50.0, p50) for r, p50 in enumerate((10.0, 20.0, 10.0))]
    plain += [_point("hybrid", 8, 0, 50.0, 40.0)]
    restricted = [_point("hybrid", 1, r, 50.0, p50) for r, p50 in enumerate((11.0, 21.0, 13.0))]
    restricted += [_point("hybrid", 8, 0, 50.0, 44.0)]
    ratios = restricted_ratios(plain, restricted)
    assert [round(v, 3) for v in ratios[("hybrid", 1)]] == [1.1, 1.05, 1.3]
    targets = query_targets(plain, EMBED, restricted)
    headline = targets["restricted_over_unrestricted_p50"]
    assert headline["value"] == 1.1 and headline["verdict"] == "spread crosses target"
    assert targets["restricted_by_point"]["hybrid@8"]["verdict"] == "met"
