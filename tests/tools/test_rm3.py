"""RM3 feedback weights against hand computation. Pure logic, no server."""

from __future__ import annotations

import pytest

from tools.records import ChunkHit, TermVectors
from tools.rm3 import Rm3Params, rm3_terms


def scored(chunk_id: str, score: float) -> ChunkHit:
    return ChunkHit(chunk_id, chunk_id.split("#")[0], "", "", "", score)


def test_rm3_terms_match_hand_computation() -> None:
    vectors = TermVectors(
        100,
        {"x#0": {"cell": 2, "tumor": 1, "the9": 1}, "y#0": {"cell": 1, "gene": 3, "a": 5}, "z#0": {"rare": 9}},
        {"cell": 5, "tumor": 3, "the9": 2, "gene": 4, "a": 1, "rare": 1},
    )
    first = [scored("x#0", 2.0), scored("y#0", 1.0), scored("z#0", 0.5)]
    terms = rm3_terms(["cell", "cancer"], first, vectors, Rm3Params(fb_docs=2, fb_terms=2, original_weight=0.5))
    # P(w|R) ∝ sum_d tf/|d| * score: cell 2/4*2 + 1/4*1 = 1.25, tumor 0.5, the9 0.5, gene 0.75 ("a" too short);
    # top 2: cell 1.25, gene 0.75 -> 0.625, 0.375; interpolated with the query (cell 0.5, cancer 0.5) at 0.5
    assert terms == pytest.approx({"cell": 0.25 + 0.3125, "cancer": 0.25, "gene": 0.1875})
    assert sum(terms.values()) == pytest.approx(1.0)


def test_rm3_skips_terms_in_more_than_a_tenth_of_the_chunks() -> None:
    vectors = TermVectors(10, {"x#0": {"common": 5, "rare": 1}}, {"common": 2, "rare": 1})
    terms = rm3_terms(["q"], [scored("x#0", 1.0)], vectors, Rm3Params(fb_terms=5, original_weight=0.0))
    assert terms == {"rare": 1.0}
    assert rm3_terms(["q"], [], vectors, Rm3Params()) == {"q": 1.0}
    with pytest.raises(ValueError, match="fb_docs >= 1"):
        Rm3Params(fb_docs=0)
