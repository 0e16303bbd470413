"""Pure functions not covered elsewhere: pooling, chunking's edge cases, length buckets of a 512-token model.
(Chunking's properties: test_chunking.py; RRF: test_fusion.py; 256-token buckets and padding: test_export_onnx.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from tools.chunking import chunk_text
from tools.embedder import length_buckets
from tools.pooling import pool_and_normalize
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


def test_blank_text_has_no_chunks_and_the_overlap_must_be_below_the_window() -> None:
    tokenizer = load_tokenizer("all-minilm-l6-v2")
    assert chunk_text("   ", tokenizer, 50, 10) == []
    with pytest.raises(ValueError, match="overlap_tokens"):
        chunk_text("some words here", tokenizer, 10, 10)


def test_length_buckets_end_at_the_model_limit() -> None:
    assert length_buckets(512) == [32, 64, 128, 192, 256, 320, 384, 448, 512]
    assert length_buckets(300)[-1] == 300
