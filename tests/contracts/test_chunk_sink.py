"""`tools.ingest.ports.ChunkSink`: the in-memory sink and the Postgres store answer alike (content-hash skips and
replaces, documents sent unchanged, collections as identity, bad batches refused whole, staging, resume and commit of
a large document's chunks)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tests.contracts.ports import DIM, record, stored_chunk_texts, stored_groups, vector
from tools.access import AccessError
from tools.errors import StoreError
from tools.ingest import ChunkSink
from tools.ingest.reuse import text_hash
from tools.records import ChunkRecord, DocumentRecord, StagedDocument, StagedRow


def staged(doc: StagedDocument, *texts: str, start: int = 0, collection: str = "default") -> list[StagedRow]:
    """Staged rows of `doc` for `texts` at chunk indexes from `start`."""
    return [
        (collection, doc.doc_id, doc.content_hash, start + i, t, len(t.split()), vector(t), json.dumps({"page": i}))
        for i, t in enumerate(texts)
    ]


async def test_the_same_hash_is_skipped_and_another_replaces(chunk_sink: ChunkSink) -> None:
    first = await chunk_sink.add_documents([record("otters", "Otters eat urchins."), record("herons", "Herons fish.")])
    assert (first.added, first.skipped, first.chunks, first.missing) == (2, 0, 2, ())
    assert await chunk_sink.stored_versions(["otters", "herons", "bees"]) == {
        "otters": "h-Otters eat urchins.",
        "herons": "h-Herons fish.",
    }
    same = await chunk_sink.add_documents([record("otters", "Otters eat urchins.")])
    assert (same.added, same.skipped, same.chunks) == (0, 1, 0)
    changed = await chunk_sink.add_documents([record("otters", "Otters use stones.", "Otters float.")])
    assert (changed.added, changed.chunks) == (1, 2)
    assert await stored_chunk_texts(chunk_sink, "default", "otters") == ["Otters use stones.", "Otters float."]


async def test_documents_sent_unchanged_are_skipped_or_reported_missing(chunk_sink: ChunkSink) -> None:
    await chunk_sink.add_documents([record("otters", "Otters eat urchins.")])
    counts = await chunk_sink.add_documents(
        [record("bees", "Bees make honey.")],
        {"otters": "h-Otters eat urchins.", "herons": "h-Herons fish."},
    )
    assert (counts.added, counts.skipped, counts.missing) == (1, 1, ("herons",))
    stale = await chunk_sink.add_documents([], {"otters": "an older hash"})
    assert stale.missing == ("otters",)


async def test_a_collection_is_part_of_a_documents_identity(chunk_sink: ChunkSink) -> None:
    await chunk_sink.add_documents([record("otters", "Otters eat urchins.")])
    zoo = await chunk_sink.add_documents([record("otters", "Zoo otters nap.")], collection="zoo")
    assert zoo.added == 1
    assert await chunk_sink.stored_versions(["otters"], "zoo") == {"otters": "h-Zoo otters nap."}
    assert await stored_chunk_texts(chunk_sink, "default", "otters") == ["Otters eat urchins."]


@pytest.mark.parametrize(
    "batch",
    [
        [record("x", "One."), record("x", "Two.")],
        [record("x", "One."), DocumentRecord("y", "", "", "h", [ChunkRecord(0, "t", 1, np.zeros(3, np.float32))])],
        [record("x", "One."), DocumentRecord("y", "", "", "h", [ChunkRecord(0, "t", 1, np.full(DIM, np.nan))])],
    ],
    ids=["repeated id", "wrong width", "not finite"],
)
async def test_a_bad_batch_is_refused_whole(chunk_sink: ChunkSink, batch: list[DocumentRecord]) -> None:
    with pytest.raises(StoreError):
        await chunk_sink.add_documents(batch)
    assert await chunk_sink.stored_versions(["x", "y"]) == {}


async def test_staged_chunks_resume_and_commit_as_one_document(chunk_sink: ChunkSink) -> None:
    doc = StagedDocument("big", "hash-1", "Big", "big.md", {"kind": "manual"})
    assert await chunk_sink.resume_point(doc) == 0
    await chunk_sink.stage_chunks(staged(doc, "zero", "one"))
    await chunk_sink.stage_chunks(staged(doc, "two", start=2))
    assert await chunk_sink.stored_versions(["big"]) == {}  # nothing visible before the commit
    assert await chunk_sink.resume_point(doc) == 3
    await chunk_sink.add_documents([record("big", "An older version.")])
    assert await chunk_sink.commit_staged(doc) == 3
    assert await chunk_sink.stored_versions(["big"]) == {"big": "hash-1"}
    assert await stored_chunk_texts(chunk_sink, "default", "big") == ["zero", "one", "two"]
    assert await chunk_sink.resume_point(doc) == 0  # the staged rows went with the commit


async def test_staged_chunks_of_another_hash_or_with_a_gap_start_over(chunk_sink: ChunkSink) -> None:
    old = StagedDocument("big", "hash-old", "Big", "big.md", {})
    await chunk_sink.stage_chunks(staged(old, "zero", "one"))
    new = StagedDocument("big", "hash-new", "Big", "big.md", {})
    assert await chunk_sink.resume_point(new) == 0
    await chunk_sink.stage_chunks(staged(new, "zero", "two", start=0)[:1] + staged(new, "two", start=2))
    assert await chunk_sink.resume_point(new) == 0  # indexes 0 and 2: a gap
    await chunk_sink.stage_chunks(staged(new, "zero"))
    assert await chunk_sink.resume_point(new) == 1


async def test_staging_is_per_collection(chunk_sink: ChunkSink) -> None:
    doc = StagedDocument("big", "hash-1", "Big", "big.md", {})
    await chunk_sink.stage_chunks(staged(doc, "zero", collection="zoo"))
    assert await chunk_sink.resume_point(doc) == 0
    assert await chunk_sink.resume_point(doc, "zoo") == 1
    assert await chunk_sink.commit_staged(doc, "zoo") == 1
    assert await chunk_sink.stored_versions(["big"], "zoo") == {"big": "hash-1"}
    assert await chunk_sink.stored_versions(["big"]) == {}


async def test_stored_vectors_are_read_by_the_hash_of_their_text(chunk_sink: ChunkSink) -> None:
    await chunk_sink.add_documents([record("otters", "Otters eat urchins.", "Otters float.")])
    await chunk_sink.add_documents([record("otters", "Otters nap.")], collection="other")
    lent = await chunk_sink.chunk_vectors(["otters", "herons"])
    assert list(lent) == ["otters"]
    by_hash = {text_hash(t): vector(t) for t in ("Otters eat urchins.", "Otters float.")}
    assert set(lent["otters"]) == set(by_hash)
    for digest, stored in lent["otters"].items():
        assert stored.dtype == np.float32 and np.allclose(stored, by_hash[digest], atol=1e-6)


async def test_the_metadata_groups_become_the_documents_groups_on_every_insert_path(chunk_sink: ChunkSink) -> None:
    listed = DocumentRecord(
        "eng", "Eng", "eng.md", "h-eng", [ChunkRecord(0, "a", 1, vector("a"))], {"groups": ["b", "a"]}
    )
    joined = DocumentRecord(
        "ops", "Ops", "ops.md", "h-ops", [ChunkRecord(0, "o", 1, vector("o"))], {"groups": "ops, x"}
    )
    await chunk_sink.add_documents([listed, joined, record("public", "p")])
    assert await stored_groups(chunk_sink, "default", "eng") == (["a", "b"], {})
    assert await stored_groups(chunk_sink, "default", "ops") == (["ops", "x"], {})
    assert await stored_groups(chunk_sink, "default", "public") == (["everyone"], {})
    again = await chunk_sink.add_documents([dataclasses.replace(listed, metadata={"groups": ["c"]})])
    assert again.skipped == 1 and (await stored_groups(chunk_sink, "default", "eng"))[0] == ["c"]
    big = StagedDocument("big", "hash-1", "Big", "big.md", {"kind": "manual", "groups": ["eng"]})
    await chunk_sink.stage_chunks(staged(big, "zero", "one"))
    assert await chunk_sink.commit_staged(big) == 2
    assert await stored_groups(chunk_sink, "default", "big") == (["eng"], {"kind": "manual"})


async def test_an_invalid_group_is_refused_naming_the_document_and_nothing_is_stored(chunk_sink: ChunkSink) -> None:
    bad = DocumentRecord("bad", "Bad", "bad.md", "h-bad", [ChunkRecord(0, "b", 1, vector("b"))], {"groups": [""]})
    with pytest.raises(AccessError, match="document 'bad'"):
        await chunk_sink.add_documents([record("fine", "f"), bad])
    assert await chunk_sink.stored_versions(["fine", "bad"]) == {}
    big = StagedDocument("big", "hash-1", "Big", "big.md", {"groups": 7})
    await chunk_sink.stage_chunks(staged(big, "zero"))
    with pytest.raises(AccessError, match=r"document 'big'.*expected a list of group names"):
        await chunk_sink.commit_staged(big)
    assert await chunk_sink.resume_point(big) == 1  # the staged chunks stay
