"""Ingestion and retrieval against the real embedded Postgres + pgvector and the real Triton embedder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.config.settings import Settings
from evals.scifact import SCIFACT_DIR as SCIFACT
from tests.conftest import GOLD_CLAIMS, run_cli
from tools.embedder import TritonEmbedder
from tools.errors import StoreError
from tools.retrieval import Retriever
from tools.retrieval_config import RetrievalConfig
from tools.store import VectorStore

pytestmark = pytest.mark.stack


def claim_text(query_id: str) -> str:
    import json

    with (SCIFACT / "queries.jsonl").open() as handle:
        for line in handle:
            record = json.loads(line)
            if record["_id"] == query_id:
                return str(record["text"])
    raise KeyError(query_id)


async def test_reingest_same_file_adds_no_chunks(store: VectorStore, settings: Settings, test_corpus: Path) -> None:
    before = await store.count()
    result = run_cli(settings, "ingest", str(test_corpus))
    assert result.returncode == 0, result.stderr
    assert "added 0 documents" in result.stdout
    assert await store.count() == before
    assert before[0] == len(test_corpus.read_text().splitlines())  # noqa: ASYNC240


@pytest.mark.parametrize(("query_id", "gold_doc"), sorted(GOLD_CLAIMS.items()))
async def test_scifact_claim_retrieves_gold_abstract_in_top_10(
    store: VectorStore, embedder: TritonEmbedder, query_id: str, gold_doc: str
) -> None:
    retriever = Retriever(embedder, store, RetrievalConfig(mode="dense"))
    result = await retriever.search(claim_text(query_id), top_k=10)
    assert gold_doc in [p.doc_id for p in result.passages]
    assert [p.number for p in result.passages] == list(range(1, 11))


async def test_hybrid_search_returns_numbered_passages_with_scores(
    store: VectorStore, embedder: TritonEmbedder
) -> None:
    result = await Retriever(embedder, store, RetrievalConfig(mode="hybrid")).search(claim_text("36"), top_k=5)
    assert len(result.passages) == 5
    scores = [p.score for p in result.passages]
    assert scores == sorted(scores, reverse=True)
    assert all(p.chunk_id.startswith(p.doc_id + "#") for p in result.passages)
    assert result.timings_ms["embed"] > 0 and result.timings_ms["search"] > 0


async def test_bad_file_is_refused_and_nothing_stored_changes(
    store: VectorStore, settings: Settings, tmp_path: Path
) -> None:
    before = await store.count()
    bad_jsonl = tmp_path / "half.jsonl"
    bad_jsonl.write_text('{"_id": "new-1", "title": "t", "text": "a valid first record"}\n{not json\n')
    binary = tmp_path / "binary.txt"
    # NULs and no byte order mark (FF FE would make it UTF-16 text, as a browser reads it)
    binary.write_bytes(b"\x00\x01\x02\x81\x00\x00\x00 not utf-8 \x00\x00\x00\x00\x00\x00\x00\x00")
    for path, message in (
        (bad_jsonl, "half.jsonl:2"),
        (binary, "binary.txt"),  # fails alone, named in the per-file summary with its cause
        (tmp_path / "nope.md", "no such file"),
    ):
        result = run_cli(settings, "ingest", str(path))
        assert result.returncode == 1
        assert message in result.stderr + result.stdout
        assert "Traceback" not in result.stderr
    assert await store.count() == before


async def test_store_built_for_another_embedder_is_refused(ingested: str) -> None:
    other = VectorStore(ingested, "bge-large-en-v1.5", 1024)
    with pytest.raises(StoreError, match=r"all-minilm-l6-v2.*dim 384.*bge-large-en-v1.5.*dim 1024"):
        await other.connect()


async def test_wrong_embedding_shape_is_refused(store: VectorStore) -> None:
    from tools.records import ChunkRecord, DocumentRecord

    doc = DocumentRecord("bad", "t", "s", "h", [ChunkRecord(0, "x", 1, np.zeros(3, dtype=np.float32))])
    before = await store.count()
    with pytest.raises(StoreError, match=r"document 'bad', chunk index 0: expected a \(384,\) embedding"):
        await store.add_documents([doc])
    nan = np.zeros(384, dtype=np.float32)
    nan[7] = np.nan
    good = ChunkRecord(0, "fine", 1, np.ones(384, dtype=np.float32) / np.sqrt(384))
    doc = DocumentRecord("nan-doc", "t", "s", "h", [good, ChunkRecord(1, "y", 1, nan)])
    with pytest.raises(StoreError, match=r"document 'nan-doc', chunk index 1: the embedding has non-finite values"):
        await store.add_documents([doc])
    assert await store.count() == before
