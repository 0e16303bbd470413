"""The stored documents as the interfaces see them: list, add (chunk, embed, store), delete, count.
Every method is scoped by collection (`tools.scope`): reads and deletes see only `collections` (None: all), an add
goes into one `collection`; reads see only the documents their `access` may read (`tools.access`; default
`UNRESTRICTED`: every document), enforced by the store's row-level security. `DocumentLibrary` is what `RagApp`
needs; `StoreLibrary` implements it over the Postgres store and the ingestion service's bulk embedder
(`agent.core.ingestion`), `tools.in_memory.InMemoryCollection` in memory (tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, Unpack

from tools.access import UNRESTRICTED, Access
from tools.ingest import SourceDocument
from tools.records import DocumentFilter, DocumentPage, IngestCounts, StoredChunk, StoredDocument
from tools.scope import DEFAULT_COLLECTION
from tools.store import VectorStore


class DocumentLibrary(Protocol):
    """Stored documents: what the document routes and commands need."""

    async def list_documents(
        self,
        limit: int | None = None,
        offset: int = 0,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> list[StoredDocument]:
        """Stored documents of `collections` ordered by doc id, from `offset`, at most `limit`."""
        ...

    async def document_page(
        self, limit: int = 100, cursor: str | None = None, offset: int = 0, **where: Unpack[DocumentFilter]
    ) -> DocumentPage:
        """One page of stored documents by doc id after `cursor` (a previous page's `next_cursor`) and `offset`
        more, with the total stored in them and the next page's cursor, narrowed by `where` (`DocumentFilter`:
        `collections`, and `matching`: only, and the total of, those whose doc id or title contains it,
        case-insensitively)."""
        ...

    async def collection_counts(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> dict[str, int]:
        """Collection name -> documents stored, by name: every collection holding a document (None), else exactly
        `collections`."""
        ...

    async def add_documents(
        self, documents: Sequence[SourceDocument], *, collection: str = DEFAULT_COLLECTION
    ) -> IngestCounts:
        """Chunk, embed and store `documents` in `collection`; the same content under an id stored there is
        skipped, other content replaces it."""
        ...

    async def delete_documents(
        self, doc_ids: Sequence[str] = (), source: str | None = None, *, collections: Sequence[str] | None = None
    ) -> list[str]:
        """Delete documents of `collections` by id and/or source, chunks included; returns the deleted ids."""
        ...

    async def count(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> tuple[int, int]:
        """(documents, chunks) stored in `collections`."""
        ...

    async def find_documents(
        self, doc_id: str, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> list[StoredDocument]:
        """The stored documents named `doc_id` in `collections`, one per collection holding it, by collection
        name; empty when none holds it."""
        ...

    async def chunk_metadata(
        self,
        doc_id: str,
        chunk_id: str,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> StoredChunk | None:
        """(collection, metadata, text) of chunk `chunk_id` of document `doc_id` in `collections`; None when none is
        stored there."""
        ...

    async def set_document_groups(
        self, doc_id: str, groups: Sequence[str], collection: str = DEFAULT_COLLECTION
    ) -> bool:
        """Set the groups allowed to read document `doc_id` of `collection`; False when it is not stored there."""
        ...


class DocumentIntake(Protocol):
    """What adds documents: `agent.core.ingestion.IngestionService` (chunk, embed on the bulk embedder, store)."""

    async def add_documents(
        self, documents: Sequence[SourceDocument], *, collection: str = DEFAULT_COLLECTION
    ) -> IngestCounts:
        """Chunk, embed and store `documents` in `collection`."""
        ...


class StoreLibrary:
    """`DocumentLibrary` over a connected Postgres store; documents are added through `intake` (the ingestion
    service, on the bulk embedder)."""

    def __init__(self, store: VectorStore, intake: DocumentIntake) -> None:
        self.store = store
        self.intake = intake

    async def list_documents(
        self,
        limit: int | None = None,
        offset: int = 0,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> list[StoredDocument]:
        """Stored documents of `collections` (None: all) (doc id, title, source, chunk count, content hash,
        ingested at, collection), ordered by doc id.

        Raises:
            StoreError: the store failed.
        """
        return await self.store.list_documents(limit=limit, offset=offset, collections=collections, access=access)

    async def document_page(
        self, limit: int = 100, cursor: str | None = None, offset: int = 0, **where: Unpack[DocumentFilter]
    ) -> DocumentPage:
        """One keyset page of stored documents narrowed by `where` (`DocumentFilter`), with their total and the
        next cursor (`VectorStore.document_page`).

        Raises:
            StoreError: a limit outside 1..10,000, a cursor the store did not issue, or the store failed.
        """
        return await self.store.document_page(limit, cursor, offset, **where)

    async def collection_counts(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> dict[str, int]:
        """Collection name -> documents stored (`VectorStore.collection_counts`)."""
        return await self.store.collection_counts(collections=collections, access=access)

    async def add_documents(
        self, documents: Sequence[SourceDocument], *, collection: str = DEFAULT_COLLECTION
    ) -> IngestCounts:
        """Chunk, embed and store `documents` in `collection` through the intake (`batch_docs` per transaction;
        batches already written stay when a later one fails).

        Raises:
            EmbedderError / StoreError: embedding or storing failed.
        """
        return await self.intake.add_documents(documents, collection=collection)

    async def delete_documents(
        self, doc_ids: Sequence[str] = (), source: str | None = None, *, collections: Sequence[str] | None = None
    ) -> list[str]:
        """Delete by id and/or source in `collections` (None: all), chunks included; nothing is deleted when it
        fails.

        Raises:
            StoreError: the delete failed.
        """
        return await self.store.delete_documents(doc_ids, source=source, collections=collections)

    async def count(
        self, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> tuple[int, int]:
        """(documents, chunks) stored in `collections` (None: all)."""
        return await self.store.count(collections=collections, access=access)

    async def find_documents(
        self, doc_id: str, *, collections: Sequence[str] | None = None, access: Access = UNRESTRICTED
    ) -> list[StoredDocument]:
        """The stored documents named `doc_id` in `collections` (None: all), by collection
        (`VectorStore.find_documents`).

        Raises:
            StoreError: the store failed.
        """
        return await self.store.find_documents(doc_id, collections=collections, access=access)

    async def chunk_metadata(
        self,
        doc_id: str,
        chunk_id: str,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> StoredChunk | None:
        """(collection, metadata, text) of chunk `chunk_id` of document `doc_id` in `collections` (None: all)."""
        return await self.store.chunk_metadata(doc_id, chunk_id, collections=collections, access=access)

    async def set_document_groups(
        self, doc_id: str, groups: Sequence[str], collection: str = DEFAULT_COLLECTION
    ) -> bool:
        """Set the groups allowed to read document `doc_id` of `collection` (`VectorStore.set_document_groups`).

        Raises:
            AccessError: a group name is not valid; StoreError: the store failed.
        """
        return await self.store.set_document_groups(doc_id, groups, collection)
