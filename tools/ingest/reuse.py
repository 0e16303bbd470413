"""Stored vectors reused for unchanged chunks: when a document changes, each chunk of the new version whose text a
chunk of a stored version holds takes that chunk's stored vector instead of being embedded again.

The look-up is by the sha256 of the chunk text among the chunks of one stored document (the old version under the
same doc id, or the one a renamed file had: `lend_from`). A vector depends only on the text and the embedder, and a
store holds one embedder's vectors (`rag_meta`), so the same text gives the same vector whatever the chunk window
that cut it; the new chunk keeps its own index, token count and location.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tools.ingest.ports import ChunkSink

ReuseRequest = tuple[str | None, Sequence[str]]
"""One document's chunk texts and the doc id of the stored document that lends vectors (None: none)."""


def text_hash(text: str) -> str:
    """sha256 hex of a chunk's text (UTF-8): the reuse key, as Postgres computes it (`tools.store.listing`)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def lend_vectors(
    store: ChunkSink, requests: Sequence[ReuseRequest], collection: str, dim: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """The stored vectors of the texts of `requests` (concatenated in order) that a lending document holds.

    Returns:
        `(n, dim)` float32 (rows not found are zero) and `(n,)` bool: which rows were found.

    Raises:
        StoreError: Postgres failed.
    """
    lenders = sorted({lender for lender, _ in requests if lender is not None})
    stored = await store.chunk_vectors(lenders, collection) if lenders else {}
    n = sum(len(texts) for _, texts in requests)
    vectors = np.zeros((n, dim), dtype=np.float32)
    found = np.zeros(n, dtype=np.bool_)
    row = 0
    for lender, texts in requests:
        known = stored.get(lender, {}) if lender is not None else {}
        for text in texts:
            vector = known.get(text_hash(text)) if known else None
            if vector is not None and vector.shape == (dim,):
                vectors[row] = vector
                found[row] = True
            row += 1
    return vectors, found
