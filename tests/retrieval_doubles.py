"""A scripted embedder and store with two fixed candidate lists, for the retriever and rerank logic tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Unpack

import numpy as np
import numpy.typing as npt

from tools.errors import StoreError
from tools.records import ChunkHit, FullTextMatch, FullTextOptions
from tools.scope import SearchScope


def hit(chunk_id: str, text: str | None = None, score: float = 0.0) -> ChunkHit:
    return ChunkHit(
        chunk_id, chunk_id.split("#")[0], "", text if text is not None else f"text of {chunk_id}", "", score
    )


class FakeEmbedder:
    """Embeds only once `release` is set (by the fake store's full-text search)."""

    def __init__(self, release: asyncio.Event) -> None:
        self.release = release

    async def embed(self, texts: Sequence[str], kind: str = "document") -> npt.NDArray[np.float32]:
        await self.release.wait()
        return np.full((len(texts), 4), 0.5, dtype=np.float32)


class FakeStore:
    def __init__(self, release: asyncio.Event, dense: list[ChunkHit], full_text: list[ChunkHit]) -> None:
        self.release, self.dense, self.full_text = release, dense, full_text
        self.fail_full_text = False

    async def dense_search(
        self,
        query: npt.NDArray[np.float32],
        top_k: int,
        ef_search: int | None = None,
        metadata_filter: dict[str, Any] | None = None,
        exact: bool = False,
        scope: SearchScope | None = None,
    ) -> list[ChunkHit]:
        return self.dense[:top_k]

    async def full_text_search(
        self, query: str, top_k: int, match: FullTextMatch = "all", **options: Unpack[FullTextOptions]
    ) -> list[ChunkHit]:
        self.release.set()
        if self.fail_full_text:
            raise StoreError("full-text search failed")
        return self.full_text[:top_k]

    async def get_document(self, doc_id: str, scope: SearchScope | None = None) -> tuple[str, str] | None:
        return None

    async def cosine_similarities(self, query: npt.NDArray[np.float32], chunk_ids: list[str]) -> dict[str, float]:
        return {}


DENSE = [hit("a#0", "same words", 0.9), hit("b#0", "same words", 0.8), hit("c#0", score=0.7), hit("d#0", score=0.6)]


FULL_TEXT = [hit("b#0", "same words", 3.0), hit("e#0", score=2.0), hit("a#0", "same words", 1.0), hit("f#0", score=0.5)]
