"""Retriever logic with no servers: the dense and full-text legs run concurrently, the same text under two doc ids
is one passage, ranking is a pure function, and a failing leg raises its own error."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Unpack

import pytest

from tests.retrieval_doubles import DENSE, FULL_TEXT, FakeEmbedder, FakeStore, hit
from tools.errors import StoreError
from tools.fusion import reciprocal_rank_fusion
from tools.records import ChunkHit, FullTextOptions, TermVectors
from tools.retrieval import CandidateLists, Retriever, rank_candidates, text_key
from tools.retrieval_config import RetrievalConfig, RetrievalMode
from tools.rm3 import Rm3Params


def retriever(mode: RetrievalMode = "hybrid") -> tuple[Retriever, FakeStore]:
    release = asyncio.Event()
    store = FakeStore(release, DENSE, FULL_TEXT)
    config = RetrievalConfig(mode, fusion="rrf", rrf_k=10, weights=(1.0, 1.0))
    return Retriever(FakeEmbedder(release), store, config), store


async def test_dense_and_full_text_legs_run_concurrently() -> None:
    """The embedding waits for the full-text search to start: run one after the other, this would never end."""
    found, _ = retriever("hybrid")
    result = await asyncio.wait_for(found.search("query", top_k=3), timeout=10)
    assert set(result.timings_ms) == {"embed", "search"}
    assert len(result.passages) == 3


@pytest.mark.parametrize("mode", ["dense", "full_text", "hybrid"])
async def test_same_text_under_two_doc_ids_is_one_passage(mode: RetrievalMode) -> None:
    found, store = retriever(mode)
    if mode == "dense":
        store.release.set()  # no full-text leg releases the embedder
    passages = (await asyncio.wait_for(found.search("query", top_k=3), timeout=10)).passages
    texts = [p.text for p in passages]
    assert len(texts) == len(set(texts)) == 3
    assert texts.count("same words") == 1
    assert [p.number for p in passages] == [1, 2, 3]


def test_rrf_merges_equal_texts_and_counts_each_list_once() -> None:
    lists = CandidateLists(DENSE, FULL_TEXT, {})
    config = RetrievalConfig(fusion="rrf", rrf_k=10, weights=(1.0, 2.0))
    fused = {h.chunk_id: s for h, s in rank_candidates(lists, config)}
    # "same words": dense rank 1 (a#0; b#0 at rank 2 is the same text), full-text rank 1 (b#0)
    assert fused == pytest.approx({"a#0": 1 / 11 + 2 / 11, "c#0": 1 / 13, "d#0": 1 / 14, "e#0": 2 / 12, "f#0": 2 / 14})
    assert text_key(DENSE[0]) == text_key(DENSE[1]) != text_key(DENSE[2])
    by_chunk = reciprocal_rank_fusion([DENSE, FULL_TEXT], k=10)
    assert {h.chunk_id for h, _ in by_chunk} == {"a#0", "b#0", "c#0", "d#0", "e#0", "f#0"}


async def test_a_failing_leg_raises_its_own_error() -> None:
    found, store = retriever("hybrid")
    store.fail_full_text = True
    with pytest.raises(StoreError, match="full-text search failed"):
        await asyncio.wait_for(found.search("query", top_k=3), timeout=10)


def test_convex_fusion_merges_equal_texts() -> None:
    lists = CandidateLists(DENSE, FULL_TEXT, {})
    fused = rank_candidates(lists, RetrievalConfig(fusion="convex", alpha=0.5, normalisation="min_max"))
    texts = [h.text for h, _ in fused]
    assert len(texts) == len(set(texts)) == 5
    # "same words" is first in both lists (a#0 dense 0.9, b#0 full text 3.0): min-max 1 in each
    assert fused[0][0].chunk_id == "a#0"
    assert fused[0][1] == pytest.approx(1.0)


class FeedbackFakeStore(FakeStore):
    """A fake store with term vectors: records the weighted query RM3 sends."""

    def __init__(self, release: asyncio.Event, dense: list[ChunkHit], full_text: list[ChunkHit]) -> None:
        super().__init__(release, dense, full_text)
        self.sent: dict[str, float] = {}

    async def query_lexemes(self, query: str) -> list[str]:
        return ["queri"]

    async def term_vectors(self, chunk_ids: Sequence[str]) -> TermVectors:
        return TermVectors(100, {c: {"expans": 1} for c in chunk_ids}, {"expans": 2})

    async def weighted_full_text_search(
        self, terms: Mapping[str, float], top_k: int, **options: Unpack[FullTextOptions]
    ) -> list[ChunkHit]:
        self.sent = dict(terms)
        return [hit("g#0", score=9.0)]


async def test_rm3_replaces_the_full_text_list_by_the_expanded_querys() -> None:
    release = asyncio.Event()
    store = FeedbackFakeStore(release, DENSE, FULL_TEXT)
    found = Retriever(FakeEmbedder(release), store, RetrievalConfig("full_text", rm3=Rm3Params(2, 5, 0.5)))
    lists = await asyncio.wait_for(found.candidate_lists("query", 10), timeout=10)
    assert [h.chunk_id for h in lists.full_text] == ["g#0"]
    assert store.sent == pytest.approx({"queri": 0.5, "expans": 0.5})
    with pytest.raises(ValueError, match="RM3 feedback needs"):
        Retriever(FakeEmbedder(release), FakeStore(release, DENSE, FULL_TEXT), RetrievalConfig(rm3=Rm3Params()))
