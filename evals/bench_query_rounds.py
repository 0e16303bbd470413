"""`rag bench query` over several rounds: the per-round points merged into medians with their spread, and the
figures judged against their targets by every round (`evals.repeats`).

A point is the dict of `evals.bench_query.measure_point` plus its `round`; an embed-only point is
`{"concurrency", "qps", "round"}`. Ratios are paired within a round (the hybrid point and the embed-only point of
the same round, measured minutes apart at most), then summarised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evals.repeats import judged, spread

MEDIAN_KEYS = ("qps", "p50_ms", "p95_ms", "p99_ms", "embed_p50_ms", "search_p50_ms", "mean_batch")
TARGETS = {
    "hybrid_over_embed_only_c32": ">= 0.7",
    "hybrid_p50_ms_c1": "<= 40",
    "restricted_over_unrestricted_p50": "<= 1.15",
}
"""The query path's targets: hybrid q/s at concurrency 32 against embed-only at 32, hybrid p50 at concurrency 1
(ms), and a restricted caller's search p50 against an unrestricted one's (`--access`, row-level security)."""


def _group(points: Sequence[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault((p.get("mode", "embed_only"), p["concurrency"]), []).append(p)
    return groups


def embed_only_ratios(
    points: Sequence[dict[str, Any]], embed_only: Sequence[dict[str, Any]]
) -> dict[tuple[str, int], list[float]]:
    """(mode, concurrency) -> the point's q/s over embed-only q/s at that concurrency, one ratio per round."""
    base = {(e["concurrency"], e["round"]): e["qps"] for e in embed_only}
    out: dict[tuple[str, int], list[float]] = {}
    for p in points:
        qps = base.get((p["concurrency"], p["round"]))
        if qps:
            out.setdefault((p["mode"], p["concurrency"]), []).append(p["qps"] / qps)
    return out


def merge_points(points: Sequence[dict[str, Any]], embed_only: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per (mode, concurrency): the median of each figure over the rounds, `n` summed, `runs`, the spread
    of q/s and p99 (`evals.repeats.Spread.as_dict`), and `embed_only_ratio` as the median of the per-round ratios
    with its spread."""
    ratios = embed_only_ratios(points, embed_only)
    merged = []
    for (mode, concurrency), runs in _group(points).items():
        point: dict[str, Any] = {"mode": mode, "concurrency": concurrency}
        for key in MEDIAN_KEYS:
            values = [r[key] for r in runs if r.get(key) is not None]
            point[key] = round(spread(values).median, 2) if values else None
        point["n"] = sum(r["n"] for r in runs)
        point["runs"] = len(runs)
        point["qps_spread"] = spread([r["qps"] for r in runs]).as_dict(2)
        point["p99_ms_spread"] = spread([r["p99_ms"] for r in runs]).as_dict(2)
        ratio = ratios.get((mode, concurrency))
        point["embed_only_ratio"] = round(spread(ratio).median, 3) if ratio else None
        point["embed_only_ratio_spread"] = spread(ratio).as_dict(3) if ratio else None
        merged.append(point)
    return merged


def merge_embed_only(embed_only: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One embed-only point per concurrency: median q/s over the rounds with its spread."""
    out = []
    for (_, concurrency), runs in _group(embed_only).items():
        qps = spread([r["qps"] for r in runs])
        out.append(
            {"concurrency": concurrency, "qps": round(qps.median, 2), "runs": len(runs), "qps_spread": qps.as_dict(2)}
        )
    return out


def restricted_ratios(
    unrestricted: Sequence[dict[str, Any]], restricted: Sequence[dict[str, Any]]
) -> dict[tuple[str, int], list[float]]:
    """(mode, concurrency) -> restricted p50 latency over unrestricted p50 latency, one ratio per round."""
    base = {(p["mode"], p["concurrency"], p["round"]): p["p50_ms"] for p in unrestricted}
    out: dict[tuple[str, int], list[float]] = {}
    for p in restricted:
        p50 = base.get((p["mode"], p["concurrency"], p["round"]))
        if p50:
            out.setdefault((p["mode"], p["concurrency"]), []).append(p["p50_ms"] / p50)
    return out


def query_targets(
    points: Sequence[dict[str, Any]],
    embed_only: Sequence[dict[str, Any]],
    restricted: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The targets (`TARGETS`) judged on the per-round figures (`evals.repeats.judged`); a figure whose points were
    not measured has value None. The restricted ratio is hybrid's at the lowest concurrency measured with
    `--access`, and every (mode, concurrency) ratio is under `restricted_by_point`."""
    ratios = embed_only_ratios(points, embed_only)
    hybrid1 = [p["p50_ms"] for p in points if p["mode"] == "hybrid" and p["concurrency"] == 1]
    targets: dict[str, Any] = {
        "hybrid_over_embed_only_c32": judged(ratios.get(("hybrid", 32), []), TARGETS["hybrid_over_embed_only_c32"]),
        "hybrid_p50_ms_c1": judged(hybrid1, TARGETS["hybrid_p50_ms_c1"], digits=2),
    }
    if restricted:
        by_point = restricted_ratios(points, restricted)
        target = TARGETS["restricted_over_unrestricted_p50"]
        hybrid = sorted(c for m, c in by_point if m == "hybrid")
        headline = by_point.get(("hybrid", hybrid[0]), []) if hybrid else []
        targets["restricted_over_unrestricted_p50"] = judged(headline, target)
        targets["restricted_by_point"] = {f"{m}@{c}": judged(v, target) for (m, c), v in sorted(by_point.items())}
    return targets
