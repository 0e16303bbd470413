"""The in-process ONNX Runtime ceiling for embedding a given set of chunks: what ingestion is compared against.

The same model file Triton serves runs in this process with ONNX Runtime (CPU, default threads = cores), batches
of 32 chunks sorted by token count (as `TritonEmbedder.embed` sorts a call), padded to the client's length
buckets; tokenization and pooling included, no serving layer, no store. Chunks per second of that loop is the
ceiling; `rag ingest` prints its throughput as a ratio of it (target >= 0.8).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tools.embedder import TritonEmbedder
from tools.pooling import pool_and_normalize

CEILING_BATCH = 32


def ceiling_chunks_per_s(
    model_file: Path, embedder: TritonEmbedder, texts: Sequence[str], batch: int = CEILING_BATCH, max_s: float = 5.0
) -> float:
    """Chunks/s of ONNX Runtime in process on `texts` (embedded as documents) at batch size `batch`.

    `embedder` is used only for its tokenizer, truncation and length buckets (nothing is sent to Triton). One
    warm-up batch, then batches until all texts are done or `max_s` seconds have passed.

    Raises:
        FileNotFoundError: no model file.
        ValueError: no texts.
    """
    import onnxruntime as ort

    if not texts:
        raise ValueError("no chunk texts to measure the ceiling on")
    if not model_file.is_file():
        raise FileNotFoundError(f"{model_file}: no ONNX model file")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(model_file), sess_options=options, providers=["CPUExecutionProvider"])
    output = session.get_outputs()[0].name
    ids = embedder.tokenize(list(texts), "document")
    order = np.argsort([len(t) for t in ids], kind="stable")
    ordered = [texts[i] for i in order]

    def run(part: Sequence[str]) -> None:
        tokens = embedder.tokenize(part, "document")
        width = next(b for b in embedder.buckets if b >= max(len(t) for t in tokens))
        input_ids = np.zeros((len(tokens), width), dtype=np.int64)
        mask = np.zeros_like(input_ids)
        for row, seq in enumerate(tokens):
            input_ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        (states,) = session.run([output], {"input_ids": input_ids, "attention_mask": mask})
        if states.ndim == 3:  # token states: pool here as the client does
            pool_and_normalize(states, mask, embedder.spec.pooling)

    batches = [ordered[i : i + batch] for i in range(0, len(ordered), batch)]
    run(batches[0])
    done = 0
    start = time.perf_counter()
    for part in batches:
        run(part)
        done += len(part)
        if time.perf_counter() - start > max_s:
            break
    return done / (time.perf_counter() - start)
