"""The rules every store applies alike (`tools.records`): listing cursors, chunk ids, and the checks of a write
batch. Pure logic, no server."""

from __future__ import annotations

import numpy as np
import pytest

from tools.errors import StoreError
from tools.records import ChunkRecord, DocumentRecord, check_batch, chunk_id, decode_cursor, encode_cursor
from tools.scope import collection_of, qualified_doc_id


@pytest.mark.parametrize("doc_id", ["a", "docs/handbook.md", "naïve café ☕", "x" * 500, "==", "-_", '"],["'])
@pytest.mark.parametrize("collection", ["default", "team-a.v2"])
def test_cursors_round_trip_any_doc_id(doc_id: str, collection: str) -> None:
    cursor = encode_cursor(doc_id, collection)
    assert decode_cursor(cursor) == (doc_id, collection)
    assert "=" not in cursor and "/" not in cursor and "+" not in cursor


@pytest.mark.parametrize(
    ("collection", "doc_id", "qualified"),
    [
        ("default", "a/handbook.md", "a/handbook.md"),
        ("default", "https://x.org/a", "https://x.org/a"),
        ("team-a", "a/handbook.md", "team-a::a/handbook.md"),
        ("default", "team-a::a/handbook.md", "default::team-a::a/handbook.md"),
        ("default", "Not A Name::x", "Not A Name::x"),
    ],
)
def test_qualified_doc_ids_are_one_to_one_across_collections(collection: str, doc_id: str, qualified: str) -> None:
    assert qualified_doc_id(collection, doc_id) == qualified
    assert chunk_id(collection, doc_id, 3) == f"{qualified}#3"
    assert collection_of(chunk_id(collection, doc_id, 3), doc_id) == collection  # the inverse


def test_a_chunk_id_of_another_document_has_no_collection() -> None:
    assert collection_of("papers::b12#0", "b1") is None
    assert collection_of("b12#0", "b1") is None
    assert collection_of("Not A Name::b1#0", "b1") is None


@pytest.mark.parametrize("cursor", ["", "%%%", "YQ==", "a", "Zm9v YmFy", "_w"])
def test_foreign_cursors_are_refused(cursor: str) -> None:
    with pytest.raises(StoreError, match="not a cursor this store issued"):
        decode_cursor(cursor)


def document(doc_id: str, embedding: list[float]) -> DocumentRecord:
    chunk = ChunkRecord(0, "text", 1, np.asarray(embedding, dtype=np.float32))
    return DocumentRecord(doc_id, "", "s", "hash", [chunk])


def test_a_batch_is_checked_before_anything_is_written() -> None:
    check_batch([document("a", [1.0, 0.0])], {"b": "hash"}, dim=2)
    with pytest.raises(StoreError, match="duplicate doc_id"):
        check_batch([document("a", [1.0, 0.0]), document("a", [0.0, 1.0])], {}, dim=2)
    with pytest.raises(StoreError, match="duplicate doc_id"):
        check_batch([document("a", [1.0, 0.0])], {"a": "hash"}, dim=2)
    with pytest.raises(StoreError, match=r"document 'a', chunk index 0: expected a \(3,\) embedding"):
        check_batch([document("a", [1.0, 0.0])], {}, dim=3)
    with pytest.raises(StoreError, match="non-finite"):
        check_batch([document("a", [float("nan"), 0.0])], {}, dim=2)
