"""Pure functions: pooling, chunking, length buckets, RRF."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tools.chunking import chunk_text
from tools.embedder import length_buckets
from tools.pooling import pool_and_normalize
from tools.retrieval import reciprocal_rank_fusion
from tools.store import ChunkHit
from tools.tokenizer import load_tokenizer


def test_mean_pooling_ignores_padding_and_normalises() -> None:
    states = np.array([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]], dtype=np.int64)
    pooled = pool_and_normalize(states, mask, "mean")
    np.testing.assert_allclose(pooled, [[1.0, 0.0]], atol=1e-7)
    cls = pool_and_normalize(np.array([[[3.0, 4.0], [9.0, 9.0]]], dtype=np.float32), np.ones((1, 2), np.int64), "cls")
    np.testing.assert_allclose(cls, [[0.6, 0.8]], atol=1e-7)


def test_pooling_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="attention_mask"):
        pool_and_normalize(np.zeros((2, 3, 4), np.float32), np.zeros((2, 4), np.int64), "mean")


def test_chunks_cover_text_with_overlap_and_size_limit() -> None:
    tokenizer = load_tokenizer("all-minilm-l6-v2")
    text = " ".join(f"sentence{i} about cells." for i in range(300))
    chunks = chunk_text(text, tokenizer, chunk_tokens=50, overlap_tokens=10)
    assert len(chunks) > 5
    assert all(c.token_count <= 50 for c in chunks)
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    for a, b in itertools.pairwise(chunks):
        assert b.start < a.end  # overlap
        assert text[b.start : b.end] == b.text
    assert chunk_text("   ", tokenizer, 50, 10) == []
    with pytest.raises(ValueError, match="overlap_tokens"):
        chunk_text(text, tokenizer, 10, 10)


def test_length_buckets_end_at_model_limit() -> None:
    assert length_buckets(256) == [32, 64, 128, 192, 256]
    assert length_buckets(512) == [32, 64, 128, 192, 256, 320, 384, 448, 512]
    assert length_buckets(512)[-1] == 512


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    def hit(cid: str) -> ChunkHit:
        return ChunkHit(cid, cid.split("#")[0], "", "", "", 0.0)

    fused = reciprocal_rank_fusion([[hit("a#0"), hit("b#0")], [hit("b#0"), hit("c#0")]], k=60)
    assert [h.chunk_id for h, _ in fused] == ["b#0", "a#0", "c#0"]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
