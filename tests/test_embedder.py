"""The Triton-served embedder against an in-process ONNX Runtime reference (real server, real model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from agent.settings import Settings
from tools.embedder import EmbedderError, TritonEmbedder
from tools.pooling import pool_and_normalize

TEXTS = [
    "Vitamin D deficiency is associated with low bone mineral density.",
    "ALDH1 expression is associated with poorer prognosis in breast cancer.",
    "short",
    "A considerably longer sentence that talks about the microstructural development of cerebral white matter "
    "in preterm infants as assessed by diffusion tensor imaging at term-equivalent age.",
]


def reference_embeddings(settings: Settings, embedder: TritonEmbedder, texts: list[str]) -> np.ndarray[Any, Any]:
    """Each text alone, unpadded, through ONNX Runtime in this process, pooled the same way."""
    onnx_file = settings.model_repository / settings.embedder_model / "1" / "model.onnx"
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    rows = []
    for ids in embedder.tokenize(texts, "document"):
        input_ids = np.array([ids], dtype=np.int64)
        mask = np.ones_like(input_ids)
        (states,) = session.run(["last_hidden_state"], {"input_ids": input_ids, "attention_mask": mask})
        rows.append(pool_and_normalize(states, mask, embedder.spec.pooling)[0])
    return np.stack(rows)


async def test_served_embeddings_equal_onnxruntime_reference(embedder: TritonEmbedder, settings: Settings) -> None:
    served = await embedder.embed(TEXTS)
    reference = reference_embeddings(settings, embedder, TEXTS)
    assert served.shape == (len(TEXTS), 384)
    assert served.dtype == np.float32
    assert np.abs(served - reference).max() <= 1e-5


async def test_text_alone_equals_same_text_inside_batch(embedder: TritonEmbedder) -> None:
    alone = await embedder.embed([TEXTS[0]])
    batch = await embedder.embed(TEXTS + [f"filler sentence number {i} about proteins" for i in range(20)])
    cosine = float(alone[0] @ batch[0])
    assert cosine >= 0.9999
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


async def test_batch_of_100_texts_comes_back_as_100_vectors_in_order(embedder: TritonEmbedder) -> None:
    texts = [
        f"claim {i}: protein {i % 7} regulates gene {i * 13} expression" + " in cells" * (i % 9) for i in range(100)
    ]
    vectors = await embedder.embed(texts)
    assert vectors.shape == (100, 384)
    assert embedder.max_batch_size == 64  # so 100 texts took two requests
    reversed_vectors = await embedder.embed(texts[::-1])
    assert np.abs(vectors - reversed_vectors[::-1]).max() <= 1e-5
    for i in (0, 41, 99):
        single = await embedder.embed([texts[i]])
        assert float(single[0] @ vectors[i]) >= 0.9999


@pytest.mark.parametrize("bad", ["", "   ", "\n\t"])
async def test_blank_text_is_refused_before_triton(embedder: TritonEmbedder, bad: str) -> None:
    with pytest.raises(EmbedderError, match=r"texts\[1\] is empty"):
        await embedder.embed(["fine", bad])


async def test_overlong_text_is_truncated_at_model_limit(embedder: TritonEmbedder) -> None:
    long_text = "word " * 2000
    (ids,) = embedder.tokenize([long_text], "document")
    assert len(ids) == 256
    vectors = await embedder.embed([long_text])
    assert vectors.shape == (1, 384) and np.isfinite(vectors).all()
