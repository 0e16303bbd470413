"""The vocabulary the ports, the doubles and the adapters share: what goes into and comes out of a store.

Plain values, no I/O: what a text is embedded as (`TextKind`); documents and chunks to write (`DocumentRecord`,
`ChunkRecord`) and what a write did (`IngestCounts`); hits and full-text options of a search (`ChunkHit`,
`FullTextMatch`, `FullTextRank`, `TermVectors`); listings (`StoredDocument`, `DocumentPage` and its cursor,
`StoredChunk`); the staged chunks of a large document (`StagedDocument`, `StagedRow`); what a folder sync recorded
(`FileState`, `SyncSource`, `StoredFile`); ingestion jobs (`Job`, `JobFile`); API keys and what they used (`ApiKey`,
`Usage`, `UsageRow`); what an answer-cache lookup found (`CacheLookup`); and the rules every store applies alike
(`chunk_id`, `check_batch`, the keyset cursor). The ports (`tools.ingest.ports`, `tools.retrieval`), the in-memory
doubles (`tools.in_memory*`) and the Postgres adapter (`tools.store`) all import them from here; the errors they
raise are `tools.errors`'.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Literal, NamedTuple, TypedDict

import numpy as np
import numpy.typing as npt

from tools.access import Access, AccessError, Role, document_groups
from tools.errors import StoreError
from tools.scope import DEFAULT_COLLECTION, SearchScope, qualified_doc_id

TextKind = Literal["query", "document"]
"""What a text is embedded as: a search query or a document passage (a model may prefix each differently)."""

FullTextMatch = Literal["all", "any"]
"""Full-text query form: every term (`all`) or any term (`any`)."""
FullTextRank = Literal["bm25", "bm25_exhaustive", "ts_rank_cd"]
"""Full-text ranking: Okapi BM25 by pruned impact-ordered postings (`bm25`), the same BM25 over every posting of
the query terms (`bm25_exhaustive`, cost grows with the corpus), or Postgres' `ts_rank_cd`."""


class FullTextOptions(TypedDict, total=False):
    """The keyword-only options of a full-text search (`full_text_search(query, top_k, match, **options)`,
    `weighted_full_text_search`, `tools.rm3.rm3_search`); each absent one takes its default.

    Attributes:
        rank: the ranking (`FullTextRank`); default `ts_rank_cd` for `full_text_search`, `bm25` for the weighted
            (RM3) search.
        k1: BM25's k1 (None or absent: the store's).
        b: BM25's b (None or absent: the store's).
        scope: only chunks of documents in this scope (`tools.scope`); None or absent: every document.
    """

    rank: FullTextRank
    k1: float | None
    b: float | None
    scope: SearchScope | None


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk to store: its text, embedding `(dim,)` float32 and token count; `metadata` says where it lies in
    its document (`{"page": 12}` or `{"section": ["Guide", "Install"]}`, empty when unknown)."""

    chunk_index: int
    text: str
    token_count: int
    embedding: npt.NDArray[np.float32]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DocumentRecord:
    """One document to store with its chunks; (collection, doc_id, `content_hash` sha256 hex) keys idempotent
    ingestion (the collection is given to `VectorStore.add_documents`)."""

    doc_id: str
    title: str
    source: str
    content_hash: str
    chunks: list[ChunkRecord]
    metadata: dict[str, Any] = field(default_factory=dict)


Hashes = Mapping[str, str]
"""doc_id -> `content_hash` of documents sent without their chunks (`add_documents`'s `unchanged`)."""


@dataclass(frozen=True)
class ChunkHit:
    """A retrieved chunk. `score` is cosine similarity for dense search, BM25 or `ts_rank_cd` for full text;
    `metadata` is the chunk's own (its page or section path, see `ChunkRecord`)."""

    chunk_id: str
    doc_id: str
    title: str
    text: str
    source: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict, kw_only=True)


@dataclass(frozen=True)
class IngestCounts:
    """What one `add_documents` call did: documents added, skipped (hash already stored), chunks written, and
    `missing`: doc ids the caller expected to be stored unchanged (and sent without chunks) that were not stored
    with that hash when the write transaction looked, under the write lock (deleted or replaced concurrently);
    the caller embeds and stores them again."""

    added: int = 0
    skipped: int = 0
    chunks: int = 0
    missing: tuple[str, ...] = ()


class StoredChunk(NamedTuple):
    """One stored chunk as a page render reads it: its collection, its metadata (span, page, line boxes) and its
    text (which a sentence's offsets, `passage_span`, index)."""

    collection: str
    metadata: dict[str, object]
    text: str


@dataclass(frozen=True)
class StoredDocument:
    """One stored document: ids, title, source, number of chunks, content hash (sha256 hex) and when it was
    ingested (UTC, `timestamptz`; a replaced document gets the time of its replacement), and its collection
    (`tools.scope`); (collection, doc_id) is its identity."""

    doc_id: str
    title: str
    source: str
    chunks: int
    content_hash: str
    ingested_at: datetime
    collection: str = DEFAULT_COLLECTION


MAX_PAGE = 10_000
"""Most documents one page of a document listing may hold."""


@dataclass(frozen=True)
class DocumentPage:
    """One page of the stored documents in doc_id order.

    Attributes:
        documents: at most the page size asked for.
        total: documents stored when the page was read (the same transaction).
        next_cursor: opaque keyset cursor of the next page (`VectorStore.document_page(cursor=...)`); None on the
            last page.
    """

    documents: list[StoredDocument]
    total: int
    next_cursor: str | None


class DocumentFilter(TypedDict, total=False):
    """The keyword-only narrowing of a document listing page (`document_page(limit, cursor, offset, **where)`).

    Attributes:
        collections: the collections listed and counted (None or absent: all); documents of others never appear.
        matching: only documents whose doc id or title contains this text, case-insensitively; the total counts
            those (None, empty or absent: all).
        access: whose listing this is (`tools.access`): only documents it may read are listed and counted (absent:
            `UNRESTRICTED`).
    """

    collections: Sequence[str] | None
    matching: str | None
    access: Access


@dataclass(frozen=True)
class TermVectors:
    """Stored BM25 term statistics of some chunks (`tools.bm25`'s tables), e.g. for pseudo-relevance feedback.

    Attributes:
        chunks: N, chunks in the corpus statistics.
        tf: chunk id -> {`english` lexeme: occurrences in the chunk} (chunks not stored are absent).
        df: lexeme -> chunks containing it, for every lexeme in `tf`.
    """

    chunks: int
    tf: dict[str, dict[str, int]]
    df: dict[str, int]


def chunk_id(collection: str, doc_id: str, chunk_index: int) -> str:
    """The stored id of chunk `chunk_index` of document `doc_id` in `collection` (`qualified_doc_id` + `#index`)."""
    return f"{qualified_doc_id(collection, doc_id)}#{chunk_index}"


def check_batch(docs: Sequence[DocumentRecord], unchanged: Mapping[str, str], dim: int) -> None:
    """Refuse a batch before anything is written.

    Raises:
        StoreError: duplicate doc ids in `docs` or between `docs` and `unchanged`, or an embedding with the wrong
            shape or non-finite values (names the doc id and chunk index).
    """
    ids = [d.doc_id for d in docs]
    if len(set(ids)) != len(ids) or set(ids) & set(unchanged):
        raise StoreError("duplicate doc_id within one batch; expected unique document ids")
    for doc in docs:
        for chunk in doc.chunks:
            where = f"document {doc.doc_id!r}, chunk index {chunk.chunk_index}"
            if chunk.embedding.shape != (dim,):
                raise StoreError(f"{where}: expected a ({dim},) embedding, got shape {chunk.embedding.shape}")
            if not np.isfinite(chunk.embedding).all():
                raise StoreError(f"{where}: the embedding has non-finite values (NaN or inf)")


def encode_cursor(doc_id: str, collection: str = DEFAULT_COLLECTION) -> str:
    """The opaque cursor of the page after document (`collection`, `doc_id`): URL-safe base64, no padding, of the
    JSON array `[doc_id, collection]`."""
    raw = json.dumps([doc_id, collection], ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    """The (doc_id, collection) a cursor of `encode_cursor` names. Raises StoreError for anything else."""
    bad = StoreError(f"cursor={cursor!r} is not a cursor this store issued; pass a `next_cursor` back")
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode()
        value = json.loads(raw)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise bad from exc
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) and v for v in value)):
        raise bad
    doc_id, collection = value
    if encode_cursor(doc_id, collection) != cursor:
        raise bad
    return doc_id, collection


StagedRow = tuple[str, str, str, int, str, int, npt.NDArray[np.float32], str]
"""One staged chunk: collection, doc id, content hash, chunk index, text, token count, embedding ((dim,) float32),
metadata as JSON text."""


@dataclass(frozen=True)
class StagedDocument:
    """The document whose chunks are staged: its id, the sha256 hex of its content (the staged rows' tag), and what
    its `documents` row stores (title, source, metadata)."""

    doc_id: str
    content_hash: str
    title: str
    source: str
    metadata: dict[str, Any]


FileStatus = Literal["stored", "empty", "skipped"]
"""`stored`: the file's document is stored and owned; `empty`: no text, no document; `skipped`: a type that is not
synced (unsupported, a JSONL corpus), no document."""


@dataclass(frozen=True)
class FileState:
    """What a sync recorded of one file: its path relative to the synced folder (POSIX), size (bytes), mtime
    (ns), the sha256 hex of its bytes, the document id it owns, that document's content hash (None for `empty`),
    and its status."""

    rel_path: str
    size: int
    mtime_ns: int
    file_hash: str
    doc_id: str
    content_hash: str | None
    status: FileStatus = "stored"


@dataclass(frozen=True)
class SyncSource:
    """A synced folder: its id, the folder (absolute), collection, id root, prefix and globs of its last run."""

    id: int
    folder: str
    collection: str
    root: str
    prefix: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]


class StoredFile(NamedTuple):
    """What `SyncLedger.store_file` did: the write's counts and the doc id of the document it removed (the one the
    file's state owned under another id, or with no text any more), or None."""

    counts: IngestCounts
    removed: str | None = None


JobStatus = Literal["queued", "running", "done", "failed"]
"""Where a job is: waiting, claimed by a worker, finished, or failed (after its errors or `DEFAULT_MAX_ATTEMPTS`)."""
JobKind = Literal["upload", "sync"]
"""`upload`: ingest the job's files (`ingest_job_files`); `sync`: sync a server-side folder (`params`: `path`,
`prefix`, `include`, `exclude`; `tools.ingest.sync`), its summary in `result`."""

DEFAULT_MAX_ATTEMPTS = 3
"""Claims of one job before a worker that stops mid-job (its lease expired) fails it instead."""


@dataclass(frozen=True)
class JobFile:
    """One file of a job: `name` is the uploaded file name (a display name and the document id's last part, never
    a path), `data` its bytes."""

    name: str
    data: bytes


@dataclass(frozen=True)
class JobProgress:
    """How far a claimed job's run got (`JobQueue.progress`): `files_done` files, `chunks` chunks stored, per-file
    `errors` (`{"file", "error"}`), and `files_total` when the run has learnt it (a sync job, once its plan is known;
    None: leave the job's as it is)."""

    files_done: int
    chunks: int
    errors: list[dict[str, str]]
    files_total: int | None = None


@dataclass(frozen=True)
class JobOutcome:
    """How a claimed job ended (`JobQueue.finish`): `status` `done` or `failed`, `timings` (seconds, e.g.
    `wall_s`), and its `result` (e.g. a sync's summary; None for an upload job)."""

    status: JobStatus
    timings: dict[str, float]
    result: dict[str, Any] | None = None


@dataclass(frozen=True)
class Job:
    """A job's state: files done of `files_total`, `chunks` its documents hold in the store, per-file `errors`
    (`{"file", "error"}`), `timings` (seconds: `wall_s` of the last attempt), `attempts` (claims so far), and the
    `collection` its documents go into."""

    id: int
    status: JobStatus
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    worker: str | None
    attempts: int
    prefix: str
    collection: str
    files_total: int
    files_done: int
    chunks: int
    errors: list[dict[str, str]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    kind: JobKind = "upload"
    params: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The job as JSON (`GET /v1/jobs/{id}`, `rag jobs show --json`): times as ISO 8601 UTC."""
        out: dict[str, Any] = dict(vars(self))
        for key in ("created_at", "started_at", "finished_at"):
            value = out[key]
            out[key] = value.isoformat() if value is not None else None
        return out


@dataclass(frozen=True)
class ApiKey:
    """A stored key (never its token nor its hash): id, name, the collections it may use, when it was created and
    revoked (None: active), and its own quotas (None: the service's defaults)."""

    id: int
    name: str
    collections: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None = None
    requests_per_minute: int | None = None
    """The key's own answer requests per minute; None: the service's `KEY_REQUESTS_PER_MINUTE`."""
    tokens_per_day: int | None = None
    """The key's own LLM tokens per UTC day; None: the service's `KEY_TOKENS_PER_DAY`."""
    group: str | None = None
    """The group the key is tied to (`rag keys create --group`): its holder reads that group's documents, in the
    collections granted to it unless the key names its own; None: public documents of the key's collections."""

    @property
    def active(self) -> bool:
        """Not revoked."""
        return self.revoked_at is None

    def to_json(self) -> dict[str, Any]:
        """The key as JSON (`rag keys list --json`): times as ISO 8601."""
        return {
            "id": self.id,
            "name": self.name,
            "collections": list(self.collections),
            "created_at": self.created_at.isoformat(),
            "revoked_at": None if self.revoked_at is None else self.revoked_at.isoformat(),
            "requests_per_minute": self.requests_per_minute,
            "tokens_per_day": self.tokens_per_day,
            "group": self.group,
        }


@dataclass
class Usage:
    """What one or more requests used: answer requests, prompt and completion tokens (as the LLM server reported
    them), embedding and LLM time in ms (the answers' `timings_ms` `embed` and `llm`)."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embed_ms: float = 0.0
    llm_ms: float = 0.0

    @property
    def tokens(self) -> int:
        """Prompt + completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        """`{"requests", "prompt_tokens", "completion_tokens", "total_tokens", "embed_ms", "llm_ms"}` (ms rounded
        to 0.1)."""
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.tokens,
            "embed_ms": round(self.embed_ms, 1),
            "llm_ms": round(self.llm_ms, 1),
        }


@dataclass(frozen=True)
class UsageRow:
    """One key's usage on one UTC day, with the key's name."""

    key_id: int
    key_name: str
    day: date
    usage: Usage

    def to_json(self) -> dict[str, Any]:
        """`{"key_id", "key_name", "day": "YYYY-MM-DD", ...Usage.to_json()}`."""
        return {"key_id": self.key_id, "key_name": self.key_name, "day": self.day.isoformat()} | self.usage.to_json()


@dataclass(frozen=True)
class CacheLookup:
    """What `PostgresAnswerCache.lookup` found.

    Attributes:
        key: the entry's key (sha256 hex of the digest and the scope's versions); store an answer under it.
        answer: the stored answer's JSON object, or None (no entry, or an expired one).
        settled: False when a collection of the scope changed within the replicas' lag bound: an answer computed
            now may have read a replica without that change, so it must not be stored.
    """

    key: str
    answer: dict[str, Any] | None
    settled: bool


@dataclass(frozen=True)
class Grant:
    """A group's role in a collection (`rag access grant`, `PUT /v1/access/grants`): members of `group` may do what
    `role` allows in `collection` (`tools.access.Role`)."""

    group: str
    collection: str
    role: Role
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        """`{"group", "collection", "role", "created_at"}` (`rag access list --json`, `GET /v1/access/grants`): the
        time as ISO 8601."""
        return {
            "group": self.group,
            "collection": self.collection,
            "role": self.role.value,
            "created_at": self.created_at.isoformat(),
        }


GROUPS_KEY = "groups"
"""The document metadata key that carries the groups allowed to read it at ingest (a list of group names, or one
comma-separated string); the store moves it into its `groups` column (`split_groups`), never keeping it in metadata."""


def split_groups(doc_id: str, metadata: Mapping[str, Any]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The groups of document `doc_id` (`tools.access.document_groups` of its metadata's `GROUPS_KEY`: a list of
    names or one comma-separated string; absent, None or empty: `PUBLIC_GROUP`) and its metadata without that key.

    Raises:
        AccessError: the value is not a list of strings or a string, or a group name is not valid; the message names
            the document and the group.
    """
    rest = {k: v for k, v in metadata.items() if k != GROUPS_KEY}
    value = metadata.get(GROUPS_KEY)
    if isinstance(value, str):
        names: list[str] = [part for part in (p.strip() for p in value.split(",")) if part]
    elif value is None:
        names = []
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        names = list(value)
    else:
        raise AccessError(
            f"document {doc_id!r}: metadata {GROUPS_KEY!r} is {value!r}; expected a list of group names or one "
            f"comma-separated string"
        )
    try:
        return document_groups(names), rest
    except AccessError as exc:
        raise AccessError(f"document {doc_id!r}: {exc}") from None


def cites_readable(
    passages: Iterable[Mapping[str, Any]], chunk_groups: Mapping[str, Sequence[str]], access: Access
) -> bool:
    """Whether `access` may read every chunk `passages` (citations or retrieved passages, JSON objects with a
    `chunk_id`) name, given `chunk_groups` (chunk id -> its document's groups; a chunk absent there, public or
    deleted since, is readable): the rule of the store's `rag_citations_readable` (`tools.store.access`), for the
    in-memory doubles."""
    named = (p.get("chunk_id") for p in passages if isinstance(p, Mapping))
    return all(access.readable(chunk_groups[c]) for c in named if isinstance(c, str) and c in chunk_groups)
