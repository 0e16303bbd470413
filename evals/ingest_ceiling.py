"""The in-process ONNX Runtime ceiling for embedding a given set of chunks: what ingestion is compared against.

The same model file Triton serves runs in this process with ONNX Runtime (CPU, default threads = cores), batches
of 32 chunks sorted by token count (as `TritonEmbedder.embed` sorts a call), padded to the client's length
buckets; tokenization included (the graph pools), no serving layer, no store. Chunks per second of that loop is the
ceiling; `rag ingest --ceiling` prints its throughput as a ratio of it (`ceiling_line`, target >= 0.8).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tools.embedder import TritonEmbedder, pad_to_bucket

CEILING_BATCH = 32
CEILING_TARGET = 0.8
"""Ingestion should reach at least this fraction of the in-process ceiling."""


def ceiling_chunks_per_s(
    model_file: Path, embedder: TritonEmbedder, texts: Sequence[str], batch: int = CEILING_BATCH, max_s: float = 5.0
) -> float:
    """Chunks/s of the served (pooled) graph under ONNX Runtime in process on `texts` (as documents), `batch` at a
    time, tokenization and padding included (`tools.onnx_session`, `tools.embedder.pad_to_bucket`).

    `embedder` is used only for its tokenizer, truncation and length buckets (nothing is sent to Triton). One
    warm-up batch, then batches until all texts are done or `max_s` seconds have passed.

    Raises:
        FileNotFoundError: no model file.
        ValueError: no texts.
    """
    from tools.onnx_session import open_session, run_pooled

    if not texts:
        raise ValueError("no chunk texts to measure the ceiling on")
    session = open_session(model_file)
    lengths = [len(t) for t in embedder.tokenize(list(texts), "document")]
    ordered = [texts[i] for i in np.argsort(lengths, kind="stable")]

    def run(part: Sequence[str]) -> None:
        run_pooled(session, *pad_to_bucket(embedder.tokenize(part, "document"), embedder.buckets))

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


def ceiling_line(model_file: Path, embedder: TritonEmbedder, chunks_per_s: float, sample: Sequence[str]) -> str:
    """One line for `rag ingest --ceiling`: the ceiling on `sample` (chunk texts of the run) and the run's
    `chunks_per_s` as a ratio of it against `CEILING_TARGET`; or why it was not measured (no model file, no sample).
    """
    if not sample:
        return "in-process ceiling not measured: the run embedded no chunks"
    if not model_file.is_file():
        return f"in-process ceiling not measured: no model file {model_file}"
    ceiling = ceiling_chunks_per_s(model_file, embedder, sample)
    ratio = chunks_per_s / ceiling if ceiling else 0.0
    verdict = "met" if ratio >= CEILING_TARGET else "not met"
    return (
        f"in-process ONNX Runtime ceiling on {len(sample)} of these chunks (batch {CEILING_BATCH}): "
        f"{ceiling:.1f} chunks/s; ingestion reached {ratio:.2f}x of it (target >= {CEILING_TARGET}: {verdict})"
    )
