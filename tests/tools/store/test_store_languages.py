"""Documents and questions in German, Chinese, Japanese and Arabic through the real ingest pipeline, Triton embedder
and Postgres: each document's language is detected at ingest and chooses its full-text analysis (a German stem, CJK
character bigrams), so a question in the document's language finds it on the full-text leg (BM25 and `ts_rank_cd`),
and the hybrid search puts it first. A store made before languages (a generated English `tsv`) is migrated with its
rows kept. Stack tier: Postgres and Triton."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from evals.retrieval_eval import ensure_database
from tools.embedder import TritonEmbedder
from tools.ingest import IngestOptions, SourceDocument, ingest_documents
from tools.records import FullTextRank
from tools.retrieval import Retriever
from tools.retrieval_config import RetrievalConfig
from tools.store import VectorStore

pytestmark = pytest.mark.stack

DOCUMENTS = {
    "de": "Die Knochendichte älterer Menschen nimmt ab, wenn sie zu wenig Vitamin D bekommen. Bewegung im Freien "
    "und Sonnenlicht helfen den Knochen, stärker zu bleiben.",
    "zh": "维生素缺乏会使老年人的骨密度降低。适当晒太阳和户外运动可以帮助骨骼保持强壮。",
    "ja": "ビタミン不足は高齢者の骨密度を下げます。日光を浴びて屋外で運動すると骨が強く保たれます。",
    "ar": "يؤدي نقص الفيتامينات إلى انخفاض كثافة العظام لدى كبار السن. ويساعد التعرض للشمس والرياضة في الهواء الطلق "
    "على بقاء العظام قوية.",
    "en": "Zebrafish tanks need clean water every week, and the fish are fed twice a day with dry flakes.",
}
QUESTIONS = {
    "de": "Warum sinkt die Knochendichte bei älteren Menschen?",  # `älteren` meets `älterer` only through the stem
    "zh": "老年人骨密度为什么降低？",  # no space in either: only character bigrams match
    "ja": "高齢者の骨密度はなぜ下がりますか",
    "ar": "لماذا تنخفض كثافة العظام لدى كبار السن؟",
}


@pytest.fixture
async def languages_store(postgres_url: str, embedder: TritonEmbedder) -> AsyncIterator[VectorStore]:
    url = await ensure_database(postgres_url, "test_store_languages")
    async with VectorStore(url, embedder.spec.name, embedder.spec.dim) as store:
        await store.delete_documents([d.doc_id for d in await store.list_documents()])
        documents = [SourceDocument(f"{code}.txt", "", text, "test", {}) for code, text in DOCUMENTS.items()]
        await ingest_documents(documents, embedder, store, IngestOptions(chunk_tokens=200, overlap_tokens=20))
        yield store


async def test_each_document_is_stored_with_its_language_and_analysed_in_it(languages_store: VectorStore) -> None:
    rows = await languages_store.pool.fetch(
        "SELECT d.doc_id, d.metadata->>'language' AS language, c.tsv::text AS tsv FROM documents d "
        "JOIN chunks c ON c.document_id = d.id ORDER BY d.doc_id"
    )
    languages = {r["doc_id"]: r["language"] for r in rows}
    assert languages == {"ar.txt": "ar", "de.txt": "de", "en.txt": "en", "ja.txt": "ja", "zh.txt": "zh"}
    tsv = {r["doc_id"]: r["tsv"] for r in rows}
    assert "'knochendicht'" in tsv["de.txt"] and "'menschen'" not in tsv["de.txt"]  # German stems: mensch
    assert "'骨密'" in tsv["zh.txt"] and "'密度'" in tsv["zh.txt"]  # character bigrams, not one lexeme per run
    assert "'骨密'" in tsv["ja.txt"]
    assert "'zebrafish'" in tsv["en.txt"] and "'tank'" in tsv["en.txt"]  # English stems: tanks -> tank


@pytest.mark.parametrize("rank", ["bm25", "bm25_exhaustive", "ts_rank_cd"])
@pytest.mark.parametrize("code", sorted(QUESTIONS))
async def test_a_question_finds_its_document_on_the_full_text_leg(
    languages_store: VectorStore, code: str, rank: FullTextRank
) -> None:
    # (`all` would ask a CJK question's every bigram, those across its word boundaries too)
    hits = await languages_store.full_text_search(QUESTIONS[code], 3, match="any", rank=rank)
    assert hits and hits[0].doc_id == f"{code}.txt", [h.doc_id for h in hits]


@pytest.mark.parametrize("code", sorted(QUESTIONS))
async def test_the_hybrid_search_puts_the_question_s_document_first(
    languages_store: VectorStore, embedder: TritonEmbedder, code: str
) -> None:
    retriever = Retriever(embedder, languages_store, RetrievalConfig())
    result = await retriever.search(QUESTIONS[code], 3)
    assert result.passages[0].doc_id == f"{code}.txt", [p.doc_id for p in result.passages]


async def test_a_store_made_before_languages_keeps_its_rows_and_indexes_new_ones_by_language(
    postgres_url: str, embedder: TritonEmbedder
) -> None:
    url = await ensure_database(postgres_url, "test_store_languages_migration")
    spec = embedder.spec
    async with VectorStore(url, spec.name, spec.dim) as store:
        await store.delete_documents([d.doc_id for d in await store.list_documents()])
        old = [SourceDocument("en.txt", "", DOCUMENTS["en"], "test", {})]
        await ingest_documents(old, embedder, store, IngestOptions(chunk_tokens=200, overlap_tokens=20))
    conn = await asyncpg.connect(url)
    try:  # the chunks table as earlier versions made it: a generated English tsv, no trigger
        await conn.execute("DROP TRIGGER chunks_tsv ON chunks")
        await conn.execute("ALTER TABLE chunks DROP COLUMN tsv")
        await conn.execute(
            "ALTER TABLE chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED"
        )
    finally:
        await conn.close()
    async with VectorStore(url, spec.name, spec.dim) as store:  # connecting migrates
        generated = await store.pool.fetchval(
            "SELECT attgenerated = 's' FROM pg_attribute WHERE attrelid = 'chunks'::regclass AND attname = 'tsv'"
        )
        assert generated is False
        assert (await store.full_text_search("zebrafish flakes", 1, rank="bm25"))[0].doc_id == "en.txt"  # kept
        new = [SourceDocument("zh.txt", "", DOCUMENTS["zh"], "test", {})]
        await ingest_documents(new, embedder, store, IngestOptions(chunk_tokens=200, overlap_tokens=20))
        assert (await store.full_text_search(QUESTIONS["zh"], 1, rank="bm25"))[0].doc_id == "zh.txt"
