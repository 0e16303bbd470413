"""Doubles shared by the fast-tier tests of ingestion, folder sync and the job worker: a scripted `DocumentEmbedder`
(the real model's spec and tokenizer, deterministic vectors, no server) and what an in-memory sink holds, in the
shape `evals.bench_sync.snapshot` reads from Postgres (so `evals.bench_sync.differences` compares the two)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from evals.bench_sync import Snapshot
from tools.in_memory_sink import InMemorySink
from tools.model_specs import EmbeddingModelSpec, get_spec
from tools.records import chunk_id
from tools.tokenizer import load_tokenizer

MODEL = "all-minilm-l6-v2"
POISON = "POISON"
"""A chunk containing this word gets a NaN embedding from the scripted embedder (a non-finite output)."""


class ScriptedEmbedder:
    """A `DocumentEmbedder`: the real model's spec and tokenizer, deterministic unit vectors per text (seeded by its
    CRC-32), NaN for a text containing `POISON`; records the size of every call, and raises `fail_with` when set
    (after `fail_after` more calls)."""

    def __init__(self) -> None:
        self.spec: EmbeddingModelSpec = get_spec(MODEL)
        self.tokenizer: Tokenizer = load_tokenizer(MODEL)
        self.calls: list[int] = []
        self.fail_with: Exception | None = None
        self.fail_after = 0

    async def embed(self, texts: Sequence[str], kind: str = "document") -> npt.NDArray[np.float32]:
        if self.fail_with is not None:
            if self.fail_after == 0:
                raise self.fail_with
            self.fail_after -= 1
        self.calls.append(len(texts))
        out = np.empty((len(texts), self.spec.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            if POISON in text:
                out[i] = np.nan
                continue
            vector = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(self.spec.dim)
            out[i] = vector / np.linalg.norm(vector)
        return out

    @property
    def embedded(self) -> int:
        """Texts embedded so far (a text embedded alone after its batch failed counts again)."""
        return sum(self.calls)


def sink_snapshot(sink: InMemorySink, collection: str) -> Snapshot:
    """What `collection` of `sink` holds, as `evals.bench_sync.snapshot` reads it from Postgres."""
    return {
        doc_id: {
            "title": doc.title,
            "source": doc.source,
            "metadata": doc.metadata,
            "content_hash": doc.content_hash,
            "chunks": [(c.chunk_index, c.text, c.token_count, c.metadata, c.embedding) for c in doc.chunks],
            "chunk_ids": [chunk_id(collection, doc_id, c.chunk_index) for c in doc.chunks],
        }
        for (c_name, doc_id), doc in sink.documents.items()
        if c_name == collection
    }
