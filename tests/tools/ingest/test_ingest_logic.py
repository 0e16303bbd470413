"""The ingest pipeline's own logic over the in-memory sink and a scripted embedder (fast tier, no server): one
write per batch in input order, idempotent re-runs, a bad chunk failing only its document, repeated ids refused
before anything is stored, per-file counts, collections, and a large document resumed from its staged chunks.
What only Postgres and Triton show (transactions, restarts, kills) stays in `test_ingest_pipeline.py` and
`test_ingest_large.py`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.ingest_doubles import MODEL, POISON, ScriptedEmbedder
from tools.errors import EmbedderError
from tools.in_memory_sink import InMemorySink
from tools.ingest import IngestError, IngestOptions, ingest, ingest_documents, plan_inputs
from tools.ingest.documents import SourceDocument
from tools.ingest.staging import LARGE_DOC_CHARS, SUB_BATCH_CHUNKS
from tools.model_specs import get_spec


@pytest.fixture
def embedder() -> ScriptedEmbedder:
    return ScriptedEmbedder()


@pytest.fixture
def sink() -> InMemorySink:
    return InMemorySink(get_spec(MODEL).dim)


def jsonl(path: Path, docs: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in docs))
    return path


TEXTS = [(f"d{i}", f"Document {i} is about topic number {i} and nothing else at all.") for i in range(5)]
OPTIONS = IngestOptions(chunk_tokens=32, overlap_tokens=0, batch_docs=2)


async def test_batches_are_written_in_input_order_one_write_each(
    tmp_path: Path, embedder: ScriptedEmbedder, sink: InMemorySink
) -> None:
    report = await ingest(plan_inputs([jsonl(tmp_path / "c.jsonl", TEXTS)]), embedder, sink, OPTIONS)
    assert (report.documents, report.added, report.skipped, report.failed) == (5, 5, 0, [])
    assert sink.transactions == 3  # batches of 2, 2, 1
    assert list(sink.documents) == [("default", f"d{i}") for i in range(5)]
    assert report.chunks == sum(len(d.chunks) for d in sink.documents.values()) >= 5
    assert embedder.calls == [2, 2, 1]
    assert len(report.sample) == report.chunks


async def test_a_rerun_embeds_nothing_and_skips_every_document(
    tmp_path: Path, embedder: ScriptedEmbedder, sink: InMemorySink
) -> None:
    inputs = plan_inputs([jsonl(tmp_path / "c.jsonl", TEXTS)])
    await ingest(inputs, embedder, sink, OPTIONS)
    embedder.calls.clear()
    again = await ingest(inputs, embedder, sink, OPTIONS)
    assert (again.added, again.skipped, again.chunks) == (0, 5, 0) and embedder.calls == []
    changed = plan_inputs([jsonl(tmp_path / "c.jsonl", [*TEXTS[:4], ("d4", "Document four changed.")])])
    third = await ingest(changed, embedder, sink, OPTIONS)
    assert (third.added, third.skipped) == (1, 4) and embedder.calls == [1]
    assert sink.documents["default", "d4"].chunks[0].text == "Document four changed."


async def test_a_bad_chunk_fails_only_its_document(
    tmp_path: Path, embedder: ScriptedEmbedder, sink: InMemorySink
) -> None:
    poisoned = ("bad", "A fine first sentence about nothing. " * 6 + f"Then the {POISON} sentence arrives here.")
    inputs = plan_inputs([jsonl(tmp_path / "c.jsonl", [TEXTS[0], poisoned, TEXTS[1]])])
    report = await ingest(inputs, embedder, sink, IngestOptions(32, 0, batch_docs=10))
    assert [(b.doc_id, b.chunk_index) for b in report.failed] == [("bad", 1)]
    assert sorted(d for _, d in sink.documents) == ["d0", "d1"]
    assert (report.documents, report.added) == (3, 2)


async def test_a_server_failure_is_raised_and_stores_nothing_of_its_batch(
    tmp_path: Path, embedder: ScriptedEmbedder, sink: InMemorySink
) -> None:
    embedder.fail_with = EmbedderError("Triton unreachable")
    with pytest.raises(EmbedderError):
        await ingest(plan_inputs([jsonl(tmp_path / "c.jsonl", TEXTS)]), embedder, sink, OPTIONS)
    assert sink.documents == {}


async def test_repeated_ids_are_refused_before_anything_is_stored(
    tmp_path: Path, embedder: ScriptedEmbedder, sink: InMemorySink
) -> None:
    first = jsonl(tmp_path / "a.jsonl", TEXTS[:2])
    second = jsonl(tmp_path / "b.jsonl", [TEXTS[1]])
    with pytest.raises(IngestError, match="d1"):
        await ingest(plan_inputs([first, second]), embedder, sink, OPTIONS)
    assert sink.documents == {} and embedder.calls == []


async def test_files_are_counted_per_type_and_a_bad_file_fails_alone(
    tmp_path: Path, embedder: ScriptedEmbedder, sink: InMemorySink
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.txt").write_text("Plain notes about otters and their habits.")
    (folder / "guide.md").write_text("# Guide\n\nInstall the package, then run it.")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\nnot really a pdf")
    (folder / "blob.bin").write_bytes(bytes(range(256)) * 4)
    report = await ingest(plan_inputs([folder], root=folder), embedder, sink, OPTIONS)
    counts = {kind: (c.stored, c.unchanged, c.failed, c.skipped) for kind, c in report.files.items()}
    assert counts == {"text": (1, 0, 0, 0), "markdown": (1, 0, 0, 0), "pdf": (0, 0, 1, 0), "unsupported": (0, 0, 0, 1)}
    assert sorted(d for _, d in sink.documents) == ["guide.md", "notes.txt"]
    assert {Path(e.path).name for e in report.file_errors} == {"broken.pdf", "blob.bin"}
    again = await ingest(plan_inputs([folder], root=folder), embedder, sink, OPTIONS)
    assert again.files["text"].unchanged == 1 and again.files["markdown"].unchanged == 1


async def test_documents_go_into_the_options_collection(
    tmp_path: Path, embedder: ScriptedEmbedder, sink: InMemorySink
) -> None:
    inputs = plan_inputs([jsonl(tmp_path / "c.jsonl", TEXTS[:1])])
    await ingest(inputs, embedder, sink, OPTIONS)
    report = await ingest(inputs, embedder, sink, IngestOptions(32, 0, collection="zoo"))
    assert report.added == 1  # the same doc id in another collection is another document
    assert sorted(sink.documents) == [("default", "d0"), ("zoo", "d0")]
    with pytest.raises(IngestError, match="collection"):
        await ingest(inputs, embedder, sink, IngestOptions(32, 0, collection="no spaces allowed"))


async def test_ingest_documents_keeps_the_last_of_a_repeated_id(embedder: ScriptedEmbedder, sink: InMemorySink) -> None:
    docs = [SourceDocument("x", "", "first version", "s", {}), SourceDocument("x", "", "second version", "s", {})]
    counts = await ingest_documents(docs, embedder, sink, OPTIONS)
    assert (counts.added, counts.chunks) == (1, 1)
    assert sink.documents["default", "x"].chunks[0].text == "second version"


class StopRunError(Exception):
    """Raised from the progress callback to interrupt a run (as Ctrl-C or a killed process would)."""


async def test_a_large_document_resumes_from_its_staged_chunks(
    tmp_path: Path, embedder: ScriptedEmbedder, sink: InMemorySink
) -> None:
    sentence = "Sea otters crack shells with stones and float in kelp beds while they eat. "
    text = "".join(f"Part {i}. {sentence}" for i in range(LARGE_DOC_CHARS // len(sentence) + 200))
    inputs = plan_inputs([jsonl(tmp_path / "big.jsonl", [("big", text)])])
    options = IngestOptions(chunk_tokens=32, overlap_tokens=0)

    def stop_after_one_sub_batch(done: int, total: int, chunks: int) -> None:
        if chunks >= SUB_BATCH_CHUNKS:
            raise StopRunError

    with pytest.raises(StopRunError):
        await ingest(inputs, embedder, sink, options, stop_after_one_sub_batch)
    assert sink.documents == {}  # nothing half-written is visible
    assert len(sink.staged["default", "big"]) == SUB_BATCH_CHUNKS
    embedder.calls.clear()
    report = await ingest(inputs, embedder, sink, options)
    stored = sink.documents["default", "big"]
    assert report.resumed_chunks == SUB_BATCH_CHUNKS and report.added == 1 and report.chunks == len(stored.chunks)
    assert embedder.embedded == len(stored.chunks) - SUB_BATCH_CHUNKS  # the staged chunks are not embedded again
    assert [c.chunk_index for c in stored.chunks] == list(range(len(stored.chunks)))
    assert sink.staged.get(("default", "big"), {}) == {}


async def test_a_changed_document_embeds_only_its_changed_chunks(
    tmp_path: Path, embedder: ScriptedEmbedder, sink: InMemorySink
) -> None:
    sections = [f"## Part {i}\n\nPart {i} is about topic number {i} and nothing else at all." for i in range(4)]
    note = tmp_path / "note.md"
    note.write_text("# Note\n\n" + "\n\n".join(sections))
    first = await ingest(plan_inputs([note], root=tmp_path), embedder, sink, OPTIONS)
    assert first.reused_chunks == 0 and embedder.embedded == first.chunks >= 4
    sections[2] = "## Part 2\n\nPart 2 changed its topic entirely."
    note.write_text("# Note\n\n" + "\n\n".join(sections))
    embedded = embedder.embedded
    second = await ingest(plan_inputs([note], root=tmp_path), embedder, sink, OPTIONS)
    assert (second.added, embedder.embedded - embedded) == (1, 1)
    assert second.reused_chunks == second.chunks - 1
    stored = sink.documents["default", "note.md"]
    again = await embedder.embed([c.text for c in stored.chunks])
    assert np.allclose(np.stack([c.embedding for c in stored.chunks]), again)
