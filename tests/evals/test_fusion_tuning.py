"""The fusion grid of `rag eval tune-fusion` on hand-made cached candidate lists: the two-stage grid, the winners,
and the cache's round trip through JSON (equal texts stay merged). Pure Python, no server."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evals.fusion_tuning import PLAIN, CandidateCache, GridPoint, grid_search, ranker_of, winners
from tools.records import ChunkHit


def row(doc_id: str, score: float, key: str | None = None) -> list[object]:
    return [f"{doc_id}#0", doc_id, key or f"key-{doc_id}", score]


def cache() -> CandidateCache:
    """q1: dense finds the relevant r1 first, BM25 puts it third; q2: the reverse; the `rm3` leg ranks r2 first."""
    return CandidateCache(
        "db",
        {
            "q1": {
                "dense": [row("r1", 0.9), row("x", 0.5)],
                PLAIN: [row("y", 9.0), row("z", 8.0), row("r1", 1.0)],
                "rm3": [row("y", 9.0), row("z", 8.0), row("r1", 1.0)],
            },
            "q2": {
                "dense": [row("x", 0.9), row("w", 0.8), row("r2", 0.7)],
                PLAIN: [row("r2", 5.0), row("x", 4.0)],
                "rm3": [row("r2", 5.0), row("x", 4.0)],
            },
        },
    )


QRELS = {"q1": {"r1": 1}, "q2": {"r2": 1}}


def test_the_grid_scores_every_lexical_leg_then_fuses_with_plain_and_the_best_feedback_leg() -> None:
    points = grid_search(
        cache(),
        QRELS,
        [PLAIN, "rm3"],
        rrf_k_grid=(1.0, 60.0),
        dense_weight_grid=(1.0,),
        alpha_grid=(0.0, 0.5, 1.0),
        normalisations=("min_max",),
    )
    assert [(p.method, p.lexical) for p in points[:2]] == [("full_text", PLAIN), ("full_text", "rm3")]
    assert len(points) == 2 + 2 * (2 + 3)
    best = winners(points)
    # either list alone: relevant at ranks 1 and 3 -> nDCG@10 (1 + 0.5) / 2; convex alpha 0.5 (min-max): q1's r1
    # ties y at 0.5 and comes first (dense list first), q2's r2 ties x and comes second -> (1 + 1 / log2 3) / 2
    assert points[0].metrics["ndcg@10"] == pytest.approx(0.75)
    assert best["convex"].params == {"normalisation": "min_max", "alpha": 0.5}
    assert best["convex"].metrics["ndcg@10"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    assert best["rrf"].metrics["ndcg@10"] == pytest.approx(
        max(p.metrics["ndcg@10"] for p in points if p.method == "rrf")
    )
    assert best["rrf_bm25"].lexical == PLAIN
    assert best["full_text"].lexical == PLAIN  # a tie with rm3 goes to the first in grid order
    assert (best["full_text_rm3"].lexical, best["convex_rm3"].lexical) == ("rm3", "rm3")


def test_the_cache_round_trips_and_keeps_equal_texts_merged(tmp_path: Path) -> None:
    original = cache()
    original.queries["q3"] = {"dense": [row("a", 0.9, "same"), row("b", 0.8, "same")], PLAIN: [row("b", 2.0, "same")]}
    original.save(tmp_path / "c.json")
    loaded = CandidateCache.load(tmp_path / "c.json", "db")
    assert loaded.queries == original.queries
    assert CandidateCache.load(tmp_path / "c.json", "other").queries == {}
    ranked: list[ChunkHit] = ranker_of(GridPoint("rrf", PLAIN, {"rrf_k": 60.0, "dense_weight": 1.0}, {}))(
        loaded.lists("q3", PLAIN)
    )
    assert [h.doc_id for h in ranked] == ["a"]
    assert loaded.has("q3", [PLAIN]) and not loaded.has("q3", ["rm3"])
