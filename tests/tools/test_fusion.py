"""Both fusions (weighted reciprocal rank fusion, the convex combination of normalised scores) against hand
computation. Pure logic, no server."""

from __future__ import annotations

import pytest

from tools.fusion import convex_fusion, normalise, reciprocal_rank_fusion
from tools.records import ChunkHit


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


def scored(chunk_id: str, score: float) -> ChunkHit:
    return ChunkHit(chunk_id, chunk_id.split("#")[0], "", "", "", score)


def test_normalisations_match_hand_computation() -> None:
    assert normalise([3.0, 2.0, 1.0], "min_max") == pytest.approx([1.0, 0.5, 0.0])
    assert normalise([1.0, 2.0, 3.0], "z_score") == pytest.approx([-(1.5**0.5), 0.0, 1.5**0.5])
    assert normalise([0.5, 0.0], "tmm", theoretical_min=-1.0) == pytest.approx([1.0, 1 / 1.5])
    assert normalise([2.0, 2.0], "min_max") == [1.0, 1.0]
    assert normalise([2.0, 2.0], "z_score") == [0.0, 0.0]
    with pytest.raises(ValueError, match="normalisation 'max'"):
        normalise([1.0], "max")  # type: ignore[arg-type]


def test_convex_fusion_matches_hand_computation() -> None:
    dense = [scored("a#0", 0.9), scored("b#0", 0.7), scored("c#0", 0.5)]
    lexical = [scored("b#0", 12.0), scored("d#0", 4.0)]
    fused = dict((h.chunk_id, s) for h, s in convex_fusion(dense, lexical, alpha=0.6))
    # dense min-max: a 1, b 0.5, c 0; lexical: b 1, d 0; a chunk missing from a list takes its lowest (0)
    assert fused == pytest.approx({"a#0": 0.6, "b#0": 0.6 * 0.5 + 0.4, "c#0": 0.0, "d#0": 0.0})
    assert [h.chunk_id for h, _ in convex_fusion(dense, lexical, alpha=0.6)] == ["b#0", "a#0", "c#0", "d#0"]
    tmm = dict((h.chunk_id, s) for h, s in convex_fusion(dense, lexical, alpha=0.5, normalisation="tmm"))
    # dense from -1: (s + 1) / 1.9; lexical from 0: s / 12; missing: the list's lowest (c 1.5/1.9, d 4/12)
    assert tmm["a#0"] == pytest.approx(0.5 * 1.0 + 0.5 * 4 / 12)
    assert tmm["d#0"] == pytest.approx(0.5 * 1.5 / 1.9 + 0.5 * 4 / 12)
    assert [h.chunk_id for h, _ in convex_fusion(dense, lexical, alpha=1.0)][:3] == ["a#0", "b#0", "c#0"]
    with pytest.raises(ValueError, match=r"alpha=1\.5"):
        convex_fusion(dense, lexical, alpha=1.5)
