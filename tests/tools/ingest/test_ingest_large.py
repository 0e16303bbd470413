"""One big document (1.1 MB of real text, SciFact abstracts run together: over five sub-batches of chunks; the
2.1 MB of the original report takes the same path twice as long, 3.5 min of embedding on 2 cores) against the real
Postgres and the real Triton: it is embedded and staged in bounded sub-batches with progress per sub-batch, an
interruption at a point the test controls keeps the staged sub-batches and stores nothing half-written, and the
re-run resumes from them and stores exactly the document's chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.config.settings import Settings
from agent.core.wiring import build_embedder
from evals.scifact import SCIFACT_DIR, load_corpus
from tools.chunking import chunk_parts, fit_window
from tools.embedder import TritonEmbedder
from tools.ingest import IngestOptions, ingest, plan_inputs, read_documents
from tools.ingest.staging import SUB_BATCH_CHUNKS
from tools.store import VectorStore

SIZE_BYTES = 1_100_000
CHUNK_TOKENS, OVERLAP_TOKENS = 200, 40
OPTIONS = IngestOptions(CHUNK_TOKENS, OVERLAP_TOKENS)


class StopRunError(Exception):
    """Raised by the test's progress hook to stop the run at a chosen point."""


@pytest.fixture(scope="module")
def big_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1.1 MB of real prose: SciFact abstracts (title, then text) one after another, as one plain-text file."""
    parts, size = [], 0
    for doc in load_corpus(SCIFACT_DIR).values():
        part = f"{doc.title}\n\n{doc.text}\n\n"
        parts.append(part)
        size += len(part.encode("utf-8"))
        if size >= SIZE_BYTES:
            break
    path = tmp_path_factory.mktemp("large") / "big.txt"
    path.write_text("".join(parts), encoding="utf-8")
    return path


@pytest.fixture
async def embedder(triton_server: Settings) -> AsyncIterator[TritonEmbedder]:
    """The ingestion embedder as `rag ingest` builds it (2 requests in flight), with a deadline that a loaded
    2-core machine meets (a bound on a hang, not a race: the outcome does not depend on it)."""
    async with build_embedder(triton_server, max_in_flight=2, timeout_s=600) as emb:
        yield emb


@pytest.mark.timeout(3000)  # ~1,400 chunks embedded on a shared 2-core machine: minutes, not seconds
async def test_big_document_ingests_in_sub_batches_and_resumes_after_an_interruption(
    fresh_db: str, embedder: TritonEmbedder, big_text: Path
) -> None:
    assert len(big_text.read_bytes()) >= SIZE_BYTES  # noqa: ASYNC240 (a local file read once)
    inputs = plan_inputs([big_text], root=big_text.parent)
    doc = next(iter(read_documents(inputs[0])))
    window, overlap = fit_window(CHUNK_TOKENS, OVERLAP_TOKENS, embedder.spec.max_tokens)
    expected = [c.text for _, c in chunk_parts(doc.content, [], embedder.tokenizer, window, overlap)]
    assert len(expected) > 4 * SUB_BATCH_CHUNKS

    seen: list[int] = []

    def stop_after_two_sub_batches(done: int, total: int, chunks: int) -> None:
        seen.append(chunks)
        if chunks >= 2 * SUB_BATCH_CHUNKS:
            raise StopRunError

    async with VectorStore(fresh_db, embedder.spec.name, embedder.spec.dim) as store:
        with pytest.raises(StopRunError):
            await ingest(
                inputs,
                embedder,
                store,
                OPTIONS,
                stop_after_two_sub_batches,
            )
        assert seen == [SUB_BATCH_CHUNKS, 2 * SUB_BATCH_CHUNKS]  # progress per sub-batch, before the document ends
        assert await store.count() == (0, 0)  # nothing half-written is visible
        staged = await store.pool.fetchval("SELECT count(*) FROM ingest_staged_chunks")
        assert staged == 2 * SUB_BATCH_CHUNKS

        progress: list[int] = []
        report = await ingest(
            inputs,
            embedder,
            store,
            OPTIONS,
            lambda done, total, chunks: progress.append(chunks),
        )
        assert report.resumed_chunks == staged  # not embedded again
        assert (report.added, report.chunks, report.failed) == (1, len(expected), [])
        assert len(progress) > len(expected) // SUB_BATCH_CHUNKS - 2 and progress == sorted(progress)
        rows = await store.pool.fetch(
            "SELECT c.chunk_index, c.text FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE d.doc_id = 'big.txt' ORDER BY c.chunk_index"
        )
        assert [r["chunk_index"] for r in rows] == list(range(len(expected)))
        assert [r["text"] for r in rows] == expected  # no chunk lost, none twice, in order
        assert await store.pool.fetchval("SELECT count(*) FROM ingest_staged_chunks") == 0
        assert await store.pool.fetchval("SELECT chunks FROM bm25_corpus") == len(expected)

        again = await ingest(inputs, embedder, store, OPTIONS)
        assert (again.added, again.skipped, again.chunks) == (0, 1, 0)
