"""A document collection held in memory: the `PassageSearch` of `tools.retrieval` and the document operations of
the store (list, add, delete, count), with no server. For tests of what sits on top of retrieval (the agent, the
HTTP API), like pydantic-ai's `TestModel` next to its real models; retrieval itself is tested against the real
Triton and Postgres.

Each document is one chunk (`tools.records.chunk_id`: `<doc_id>#0` in the default collection, title and text
as one passage); (collection, doc_id) is a document's identity, as in the store. Scores are deterministic:

- dense: cosine similarity of hashed bag-of-words vectors (`HASH_DIM` dimensions, word counts, L2-normalised; words
  are lower-case `\\w+` runs, hashed with CRC-32), so texts that share no word have cosine 0;
- full text: the share of the query's distinct words the chunk contains (chunks with none are not hits);
- hybrid: the fusion its `RetrievalConfig` says, by the same function as `Retriever` (`tools.retrieval.rank_candidates`;
  default: the app's convex combination), each list cut at `config.candidates` hits as the store's would be.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Unpack

import numpy as np
import numpy.typing as npt

from tools.access import PUBLIC_GROUP, UNRESTRICTED, Access, AccessError, document_groups
from tools.ingest import SourceDocument
from tools.records import (
    ChunkHit,
    DocumentFilter,
    DocumentPage,
    IngestCounts,
    StoredChunk,
    StoredDocument,
    chunk_id,
    decode_cursor,
    encode_cursor,
    split_groups,
)
from tools.retrieval import CandidateLists, Passage, RetrievalResult, rank_candidates
from tools.retrieval_config import RetrievalConfig
from tools.scope import DEFAULT_COLLECTION, Scalar, SearchScope, check_collection

HASH_DIM = 512
"""Dimensions of the hashed bag-of-words vectors."""
_WORD = re.compile(r"\w+")


def hashed_vector(text: str) -> npt.NDArray[np.float32]:
    """The `(HASH_DIM,)` float32 L2-normalised bag-of-words vector of `text` (all zeros for a text without words)."""
    vector = np.zeros(HASH_DIM, dtype=np.float32)
    for word in _WORD.findall(text.lower()):
        vector[zlib.crc32(word.encode()) % HASH_DIM] += 1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


@dataclass(frozen=True)
class _Entry:
    document: SourceDocument
    vector: npt.NDArray[np.float32]
    words: frozenset[str]
    ingested_at: datetime
    collection: str = DEFAULT_COLLECTION
    groups: tuple[str, ...] = (PUBLIC_GROUP,)

    def within(self, scope: SearchScope | None) -> bool:
        """True when this document lies in `scope` (None: everything), with the store's semantics
        (`tools.store.filters`): JSON equality of metadata values, `ingested_at` in [after, before), and readable by
        the scope's `access` (the store's row-level security)."""
        if scope is None:
            return True
        doc = self.document
        return (
            scope.access.readable(self.groups)
            and (scope.collections is None or self.collection in scope.collections)
            and all(
                key in doc.metadata and any(_json_equal(doc.metadata[key], v) for v in values)
                for key, values in scope.metadata.items()
            )
            and (not scope.sources or doc.source in scope.sources)
            and (scope.ingested_after is None or self.ingested_at >= scope.ingested_after)
            and (scope.ingested_before is None or self.ingested_at < scope.ingested_before)
        )

    @property
    def hit(self) -> ChunkHit:
        doc = self.document
        return ChunkHit(chunk_id(self.collection, doc.doc_id, 0), doc.doc_id, doc.title, doc.content, doc.source, 0.0)


class InMemoryCollection:
    """Documents in memory, searched like the store (see the module docstring).

    Args:
        documents: the initial documents (a repeated doc id: the last one wins), in `collection`.
        config: how to rank, as `Retriever` (its mode, candidates, fusion and fusion parameters apply; the store's
            options do not); default: the app's defaults.

    Attributes:
        searches: the queries searched, in order (what a test checks the caller asked for).
    """

    def __init__(
        self,
        documents: Sequence[SourceDocument] = (),
        config: RetrievalConfig = RetrievalConfig(),  # noqa: B008 (frozen: one shared default is safe)
        collection: str = DEFAULT_COLLECTION,
    ) -> None:
        self.config = config
        self.searches: list[str] = []
        self._entries: dict[tuple[str, str], _Entry] = {}
        """By (doc_id, collection): the store's identity and listing order."""
        for doc in documents:
            self._put(doc, collection)

    def _put(self, doc: SourceDocument, collection: str) -> None:
        groups, metadata = split_groups(doc.doc_id, doc.metadata)
        words = frozenset(_WORD.findall(doc.content.lower()))
        self._entries[doc.doc_id, collection] = _Entry(
            replace(doc, metadata=metadata),
            hashed_vector(doc.content),
            words,
            datetime.now(UTC),
            check_collection(collection),
            groups,
        )

    async def search(self, query: str, top_k: int, scope: SearchScope | None = None) -> RetrievalResult:
        """Up to `top_k` passages for `query` in this collection's mode from the documents in `scope` (None: all),
        each with its dense cosine (see `tools.retrieval.PassageSearch.search`); timings are 0.

        Raises:
            ValueError: blank query or top_k < 1.
        """
        if not query.strip():
            raise ValueError("query is empty; expected a non-blank question")
        if top_k < 1:
            raise ValueError(f"top_k={top_k}; expected >= 1")
        self.searches.append(query)
        vector = hashed_vector(query)
        entries = [e for e in self._entries.values() if e.within(scope)]
        cosine = {e.hit.chunk_id: float(e.vector @ vector) for e in entries}
        dense = sorted((_scored(e.hit, cosine[e.hit.chunk_id]) for e in entries), key=lambda h: -h.score)
        terms = set(_WORD.findall(query.lower()))
        full_text = sorted(
            (_scored(e.hit, len(terms & e.words) / len(terms)) for e in entries if terms and terms & e.words),
            key=lambda h: -h.score,
        )
        size = max(top_k, self.config.candidates)
        lists = CandidateLists(dense[:size], full_text[:size], {"embed": 0.0, "search": 0.0})
        ranked = rank_candidates(lists, self.config)[:top_k]
        passages = [Passage.of(n, h, score, cosine[h.chunk_id]) for n, (h, score) in enumerate(ranked, 1)]
        return RetrievalResult(query, passages, dict(lists.timings_ms))

    async def get_document(self, doc_id: str, scope: SearchScope | None = None) -> tuple[str, str] | None:
        """(title, text) of a stored document in `scope` (None: any), from the first collection by name that holds
        it there; None when it is not stored there."""
        entries = [self._entries[k] for k in sorted(self._entries) if k[0] == doc_id and self._entries[k].within(scope)]
        return (entries[0].document.title, entries[0].document.text) if entries else None

    async def add_documents(
        self, documents: Sequence[SourceDocument], collection: str = DEFAULT_COLLECTION
    ) -> IngestCounts:
        """Store `documents` in `collection`: the same content under a stored id is skipped, other content replaces
        it (one chunk each).

        The metadata's `groups` are the document's (`tools.records.split_groups`), as in the store.

        Raises:
            tools.scope.ScopeError: an invalid collection name.
            AccessError: a document's `groups` is not valid (names the document and the group); nothing is stored.
        """
        check_collection(collection)
        for doc in documents:
            split_groups(doc.doc_id, doc.metadata)
        added = skipped = 0
        for doc in documents:
            stored = self._entries.get((doc.doc_id, collection))
            if stored is not None and stored.document.content_hash == doc.content_hash:
                skipped += 1
                groups = split_groups(doc.doc_id, doc.metadata)[0]
                self._entries[doc.doc_id, collection] = replace(stored, groups=groups)
                continue
            self._put(doc, collection)
            added += 1
        return IngestCounts(added=added, skipped=skipped, chunks=added)

    def _keys(self, collections: Sequence[str] | None, access: Access = UNRESTRICTED) -> list[tuple[str, str]]:
        """(doc_id, collection) of the stored documents of `collections` (None: all) that `access` may read,
        sorted."""
        return sorted(
            k
            for k, e in self._entries.items()
            if (collections is None or e.collection in collections) and access.readable(e.groups)
        )

    async def set_document_groups(
        self, doc_id: str, groups: Sequence[str], collection: str = DEFAULT_COLLECTION
    ) -> bool:
        """Set the groups allowed to read document `doc_id` of `collection` (none: `PUBLIC_GROUP`); False when it
        is not stored.

        Raises:
            AccessError: a group name is not valid; ScopeError: an invalid collection name.
        """
        check_collection(collection)
        if isinstance(groups, str):
            raise AccessError(f"groups {groups!r}: expected a list of group names, got one string")
        stored = document_groups(groups)
        entry = self._entries.get((doc_id, collection))
        if entry is None:
            return False
        self._entries[doc_id, collection] = replace(entry, groups=stored)
        return True

    async def document_page(
        self, limit: int = 100, cursor: str | None = None, offset: int = 0, **where: Unpack[DocumentFilter]
    ) -> DocumentPage:
        """Documents of `where["collections"]` (absent or None: all) by doc id after `cursor` (skipping `offset`
        more), at most `limit`, their total and the next cursor (the store's cursor format); with
        `where["matching"]`, only those whose doc id or title contains it, case-insensitively (the store's
        `ILIKE`)."""
        after = ("", "") if cursor is None else decode_cursor(cursor)
        needle = (where.get("matching") or "").casefold()
        mine = [
            k
            for k in self._keys(where.get("collections"), where.get("access", UNRESTRICTED))
            if k[0].casefold().find(needle) >= 0 or self._entries[k].document.title.casefold().find(needle) >= 0
        ]
        keys = [k for k in mine if k > after][offset:]
        page = [self._stored(self._entries[k]) for k in keys[:limit]]
        more = len(keys) > limit
        last = page[-1] if page else None
        return DocumentPage(
            page, len(mine), encode_cursor(last.doc_id, last.collection) if more and last is not None else None
        )

    async def collection_counts(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> dict[str, int]:
        """Collection name -> documents stored in it that `access` may read, by name: every collection holding
        one (None), else exactly `collections` (0 for one holding none)."""
        counts = {name: 0 for name in collections or ()}
        for key in self._keys(collections, access):
            entry = self._entries[key]
            counts[entry.collection] = counts.get(entry.collection, 0) + 1
        return dict(sorted(counts.items()))

    async def list_documents(
        self,
        limit: int | None = None,
        offset: int = 0,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> list[StoredDocument]:
        """Stored documents of `collections` (None: all) that `access` may read, ordered by doc id, from `offset`,
        at most `limit`."""
        entries = [self._entries[k] for k in self._keys(collections, access)][offset:]
        return [self._stored(e) for e in (entries if limit is None else entries[:limit])]

    @staticmethod
    def _stored(entry: _Entry) -> StoredDocument:
        d = entry.document
        return StoredDocument(d.doc_id, d.title, d.source, 1, d.content_hash, entry.ingested_at, entry.collection)

    async def delete_documents(
        self, doc_ids: Sequence[str] = (), source: str | None = None, *, collections: Sequence[str] | None = None
    ) -> list[str]:
        """Delete by id and/or source within `collections` (None: all); returns the deleted ids (absent ids are
        not listed)."""
        wanted = set(doc_ids)
        doomed = [
            k
            for k in self._keys(collections)
            if k[0] in wanted or (source is not None and self._entries[k].document.source == source)
        ]
        for k in doomed:
            del self._entries[k]
        return [doc_id for doc_id, _ in doomed]

    async def count(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> tuple[int, int]:
        """(documents, chunks) stored in `collections` (None: all) that `access` may read: one chunk per
        document."""
        n = len(self._keys(collections, access))
        return n, n

    async def find_documents(
        self, doc_id: str, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> list[StoredDocument]:
        """The stored documents named `doc_id` in `collections` (None: all) that `access` may read, one per
        collection holding it, by collection name."""
        found = [self._stored(self._entries[k]) for k in self._keys(collections, access) if k[0] == doc_id]
        return sorted(found, key=lambda d: d.collection)

    async def chunk_metadata(
        self,
        doc_id: str,
        chunk_id: str,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> StoredChunk | None:
        """(collection, metadata, text) of the one chunk of `doc_id` in `collections` (None: all) that `access` may
        read whose id is `chunk_id`: its span over the whole content (no layout here)."""
        for key in self._keys(collections, access):
            entry = self._entries[key]
            if key[0] == doc_id and entry.hit.chunk_id == chunk_id:
                return StoredChunk(entry.collection, {"span": [0, len(entry.document.content)]}, entry.hit.text)
        return None


def _scored(hit: ChunkHit, score: float) -> ChunkHit:
    return ChunkHit(hit.chunk_id, hit.doc_id, hit.title, hit.text, hit.source, score)


def _json_equal(stored: Any, wanted: Scalar) -> bool:
    """JSON equality of a stored metadata value and a filter value: booleans equal only booleans, numbers only
    numbers (`2019 == 2019.0`), strings only strings."""
    if isinstance(wanted, bool) or isinstance(stored, bool):
        return isinstance(wanted, bool) and isinstance(stored, bool) and stored == wanted
    if isinstance(wanted, int | float):
        return isinstance(stored, int | float) and stored == wanted
    return isinstance(stored, str) and stored == wanted
