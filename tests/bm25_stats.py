"""BM25 statistics read back from the store's tables, shared by the BM25 and document tests."""

from __future__ import annotations

from typing import Any

from tools.store import VectorStore


async def statistics(store: VectorStore) -> dict[str, Any]:
    """The maintained statistics and postings, and the same recounted from the chunks' tsvectors."""
    async with store.pool.acquire() as conn:
        corpus = await conn.fetchrow("SELECT chunks, sum_dl FROM bm25_corpus")
        recount = await conn.fetchrow("SELECT count(*) AS chunks, coalesce(sum(token_count), 0) AS sum_dl FROM chunks")
        lexicon = await conn.fetch("SELECT lexeme, df FROM bm25_lexicon ORDER BY lexeme")
        df = await conn.fetch(
            "SELECT u.lexeme, count(*) AS df FROM chunks c, unnest(c.tsv) u GROUP BY u.lexeme ORDER BY u.lexeme"
        )
        postings = await conn.fetch("SELECT chunk, lexeme, tf, dl FROM bm25_postings ORDER BY chunk, lexeme")
        expected = await conn.fetch(
            """
            SELECT c.id AS chunk, u.lexeme, cardinality(u.positions) AS tf, c.token_count AS dl
            FROM chunks c, unnest(c.tsv) u ORDER BY c.id, u.lexeme
            """
        )
    assert corpus is not None and recount is not None
    return {
        "maintained": (tuple(corpus), [tuple(r) for r in lexicon], [tuple(r) for r in postings]),
        "recount": (tuple(recount), [tuple(r) for r in df], [tuple(r) for r in expected]),
    }


