"""A retriever that returns the same passages for every query, for tests of the LLM side (error mapping, limits,
request shapes) where retrieval is not what is tested; retrieval itself is tested against the real Triton and
Postgres (test_retrieval.py, test_store_ingest.py)."""

from __future__ import annotations

from typing import cast

from tools.embedder import TritonEmbedder
from tools.retrieval import Passage, RetrievalResult, Retriever
from tools.store import ChunkHit, VectorStore

B12 = "Vitamin B12 deficiency raises plasma homocysteine in older adults."


def passage(n: int, text: str = B12) -> Passage:
    """Passage number `n` of document `doc<n>` (chunk `doc<n>#0`), dense cosine 0.9."""
    return Passage.of(n, ChunkHit(f"doc{n}#0", f"doc{n}", f"Title {n}", text, "test", 0.0), 1.0 / n, 0.9)


class FixedRetriever(Retriever):
    """`search` returns the first `top_k` of `passages` (numbered 1..n) with zero timings; nothing is embedded or
    stored, so no server is needed."""

    def __init__(self, passages: list[Passage] | None = None) -> None:
        super().__init__(cast(TritonEmbedder, None), cast(VectorStore, None))
        self.passages = passages if passages is not None else [passage(n) for n in (1, 2, 3)]

    async def search(self, query: str, top_k: int) -> RetrievalResult:
        """The fixed passages for any non-blank `query`.

        Raises:
            ValueError: blank query or top_k < 1, as the real retriever.
        """
        if not query.strip() or top_k < 1:
            raise ValueError(f"query {query!r}, top_k={top_k}; expected a non-blank query and top_k >= 1")
        return RetrievalResult(query, self.passages[:top_k], {"embed": 0.0, "search": 0.0})
