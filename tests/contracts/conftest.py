"""The implementations each contract suite runs over: the in-memory double (fast tier) and the real one (a `stack`
param: Postgres, and Triton where the port embeds). Each real one gets a database of its own, emptied per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol, TypeVar

import asyncpg
import pytest

from agent.config.settings import Settings
from agent.core.grants import GrantStore
from agent.core.ingestion import IngestionService
from agent.core.library import StoreLibrary
from agent.core.wiring import build_retriever
from evals.retrieval_eval import ensure_database
from tests.contracts.ports import DIM, Documents, Ledger
from tools.conversations import ConversationLog
from tools.embedder import TritonEmbedder
from tools.feedback import FeedbackLog
from tools.in_memory import InMemoryCollection
from tools.in_memory_conversations import InMemoryConversations
from tools.in_memory_feedback import InMemoryFeedback
from tools.in_memory_grants import InMemoryGrants
from tools.in_memory_jobs import InMemoryJobQueue
from tools.in_memory_originals import InMemoryOriginals
from tools.in_memory_sink import InMemorySink
from tools.in_memory_sync import InMemorySyncLedger
from tools.ingest import ChunkSink, IngestOptions
from tools.ingest.ports import KeptOriginals
from tools.jobs.ports import JobQueue
from tools.model_specs import get_spec
from tools.originals import Originals
from tools.store import VectorStore
from tools.store.conversations import ConversationStore
from tools.store.feedback import PostgresFeedback
from tools.store.grants import PostgresGrants
from tools.store.jobs import PostgresJobQueue
from tools.store.sync_state import PostgresSyncLedger

IMPLEMENTATIONS = ["in_memory", pytest.param("postgres", marks=pytest.mark.stack)]
"""The params of every contract fixture: the double, then the real implementation (stack tier)."""

D = TypeVar("D")
P = TypeVar("P", bound="SetUpTables")


async def empty_store(postgres_url: str, database: str, settings: Settings) -> VectorStore:
    """A connected store on its own database `database`, with no documents and no conversations."""
    url = await ensure_database(postgres_url, database)
    spec = get_spec(settings.embedder_model)
    store = VectorStore(url, spec.name, spec.dim)
    await store.connect()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DELETE FROM conversations")
        await conn.execute("DELETE FROM answer_records")
        await conn.execute("DELETE FROM documents")
        await conn.execute("DROP TABLE IF EXISTS ingest_staged_chunks")  # made again by the first resume_point
    finally:
        await conn.close()
    return store


class SetUpTables(Protocol):
    """Tables over a pool that create themselves (`PostgresJobQueue`, `PostgresGrants`)."""

    async def setup(self) -> None:
        """Create the tables when missing."""
        ...


@asynccontextmanager
async def double_or_tables(
    real_servers: tuple[str, Settings] | None,
    double: Callable[[], D],
    database: str,
    tables: Callable[[asyncpg.Pool, float], P],
    emptied_by: str,
) -> AsyncIterator[D | P]:
    """`double()` for the in-memory param; else `tables` over the pool of a store on its own `database`, set up and
    emptied by the statement `emptied_by`, the store closed at exit."""
    if real_servers is None:
        yield double()
        return
    store = await empty_store(real_servers[0], database, real_servers[1])
    try:
        made = tables(store.pool, store.acquire_timeout_s)
        await made.setup()
        await store.pool.execute(emptied_by)
        yield made
    finally:
        await store.close()


@pytest.fixture(params=IMPLEMENTATIONS)
def real_servers(request: pytest.FixtureRequest) -> tuple[str, Settings] | None:
    """None for the double; for the real implementation (postgres URL, settings), the session's servers started."""
    if request.param == "in_memory":
        return None
    return request.getfixturevalue("postgres_url"), request.getfixturevalue("settings")


@pytest.fixture
async def conversation_log(real_servers: tuple[str, Settings] | None) -> AsyncIterator[ConversationLog]:
    """`InMemoryConversations`, or `ConversationStore` over Postgres."""
    if real_servers is None:
        yield InMemoryConversations()
        return
    store = await empty_store(real_servers[0], "test_contract_conversations", real_servers[1])
    try:
        yield ConversationStore(store)
    finally:
        await store.close()


@pytest.fixture
async def feedback_log(real_servers: tuple[str, Settings] | None) -> AsyncIterator[FeedbackLog]:
    """`InMemoryFeedback`, or `PostgresFeedback` over Postgres."""
    if real_servers is None:
        yield InMemoryFeedback()
        return
    store = await empty_store(real_servers[0], "test_contract_feedback", real_servers[1])
    try:
        yield PostgresFeedback(store)
    finally:
        await store.close()


@pytest.fixture
def real_embedder(request: pytest.FixtureRequest, real_servers: tuple[str, Settings] | None) -> TritonEmbedder | None:
    """The session's Triton embedder for the real implementation (Triton started); None for the double."""
    return None if real_servers is None else request.getfixturevalue("embedder")


@pytest.fixture
async def documents(
    real_servers: tuple[str, Settings] | None, real_embedder: TritonEmbedder | None
) -> AsyncIterator[Documents]:
    """`InMemoryCollection` as both ports, or `StoreLibrary` + `Retriever` over Triton and Postgres."""
    if real_servers is None or real_embedder is None:
        collection = InMemoryCollection()
        yield Documents(collection, collection)
        return
    postgres_url, settings = real_servers
    embedder = real_embedder
    store = await empty_store(postgres_url, "test_contract_documents", settings)
    try:
        intake = IngestionService(embedder, store, IngestOptions(200, 40, batch_docs=8), settings)
        library = StoreLibrary(store, intake)
        yield Documents(library, build_retriever(embedder, store, settings))
    finally:
        await store.close()


@pytest.fixture
async def chunk_sink(real_servers: tuple[str, Settings] | None) -> AsyncIterator[ChunkSink]:
    """`InMemorySink`, or `VectorStore` over Postgres (384-dimensional embeddings either way)."""
    if real_servers is None:
        yield InMemorySink(get_spec("all-minilm-l6-v2").dim)
        return
    store = await empty_store(real_servers[0], "test_contract_chunks", real_servers[1])
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def sync_ledger(real_servers: tuple[str, Settings] | None) -> AsyncIterator[Ledger]:
    """`InMemorySyncLedger` over an `InMemorySink`, or `PostgresSyncLedger` over the Postgres store (no source)."""
    if real_servers is None:
        sink = InMemorySink(DIM)
        yield Ledger(InMemorySyncLedger(sink), sink)
        return
    store = await empty_store(real_servers[0], "test_contract_sync", real_servers[1])
    try:
        ledger = PostgresSyncLedger(store)
        await ledger.setup()
        await store.pool.execute("DELETE FROM sync_sources")  # and their files (ON DELETE CASCADE)
        yield Ledger(ledger, store)
    finally:
        await store.close()


@pytest.fixture
async def job_queue(real_servers: tuple[str, Settings] | None) -> AsyncIterator[JobQueue]:
    """`InMemoryJobQueue`, or `PostgresJobQueue` over Postgres (no job)."""
    emptied = "TRUNCATE ingest_jobs RESTART IDENTITY CASCADE"
    async with double_or_tables(real_servers, InMemoryJobQueue, "test_contract_jobs", PostgresJobQueue, emptied) as q:
        yield q


@pytest.fixture(params=["in_memory", "files"])
def kept_originals(request: pytest.FixtureRequest, tmp_path: Path) -> KeptOriginals:
    """`InMemoryOriginals`, or `Originals` on a temporary folder (no server: both run in the fast tier)."""
    return InMemoryOriginals() if request.param == "in_memory" else Originals(tmp_path / "originals")


@pytest.fixture
async def grant_book(real_servers: tuple[str, Settings] | None) -> AsyncIterator[GrantStore]:
    """`InMemoryGrants`, or `PostgresGrants` over Postgres (no grant)."""
    emptied = "DELETE FROM access_grants"
    async with double_or_tables(real_servers, InMemoryGrants, "test_contract_grants", PostgresGrants, emptied) as g:
        yield g
