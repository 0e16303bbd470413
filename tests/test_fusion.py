"""Weighted reciprocal rank fusion against hand computation. Pure logic, no server."""

from __future__ import annotations

import pytest

from tools.retrieval import reciprocal_rank_fusion
from tools.store import ChunkHit


def hit(chunk_id: str) -> ChunkHit:
    return ChunkHit(chunk_id, chunk_id.split("#")[0], "", "", "", 0.0)


def test_weighted_rrf_matches_hand_computation() -> None:
    fused = reciprocal_rank_fusion([[hit("a#0"), hit("b#0")], [hit("b#0"), hit("c#0")]], k=10, weights=[2.0, 1.0])
    scores = {h.chunk_id: s for h, s in fused}
    assert scores == pytest.approx({"a#0": 2 / 11, "b#0": 2 / 12 + 1 / 11, "c#0": 1 / 12})
    assert [h.chunk_id for h, _ in fused] == ["b#0", "a#0", "c#0"]


def test_rrf_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k=0"):
        reciprocal_rank_fusion([[hit("a#0")]], k=0)
    with pytest.raises(ValueError, match="1 RRF weights for 2 ranked lists"):
        reciprocal_rank_fusion([[hit("a#0")], [hit("b#0")]], weights=[1.0])
