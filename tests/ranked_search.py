"""A search over a fixed ranked list of passages (`tools.retrieval.PassageSearch`), for tests of what the agent does
with passages (fitting them to the context window, how an answer ends) where the ranking itself is not tested."""

from __future__ import annotations

from tools.records import ChunkHit
from tools.retrieval import Passage, RetrievalResult
from tools.scope import SearchScope

B12 = "Vitamin B12 deficiency raises plasma homocysteine in older adults."


def passage(n: int, text: str = B12) -> Passage:
    """Passage number `n` (rank n) of document `doc<n>` (chunk `doc<n>#0`), dense cosine 0.9."""
    return Passage.of(n, ChunkHit(f"doc{n}#0", f"doc{n}", f"Title {n}", text, "test", 0.0), 1.0 / n, 0.9)


class RankedSearch:
    """`search` returns the first `top_k` of `passages` (best first) for any non-blank query, with zero timings."""

    def __init__(self, passages: list[Passage] | None = None) -> None:
        self.passages = passages if passages is not None else [passage(n) for n in (1, 2, 3)]

    async def search(self, query: str, top_k: int, scope: SearchScope | None = None) -> RetrievalResult:
        """The first `top_k` passages.

        Raises:
            ValueError: blank query or top_k < 1, as the real search.
        """
        if not query.strip() or top_k < 1:
            raise ValueError(f"query {query!r}, top_k={top_k}; expected a non-blank query and top_k >= 1")
        return RetrievalResult(query, self.passages[:top_k], {"embed": 0.0, "search": 0.0})

    async def get_document(self, doc_id: str, scope: SearchScope | None = None) -> tuple[str, str] | None:
        """The title and text of `doc_id`'s passage; None when the list has none."""
        found = next((p for p in self.passages if p.doc_id == doc_id), None)
        return (found.title, found.text) if found is not None else None
