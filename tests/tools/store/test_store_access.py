"""Permissions per document against the real Postgres: row-level security hides every row of a document whose groups
do not meet the reader's, on every read path and in a statement without any filter; a missing setting reads nothing;
the operator reads everything; groups move; an old store becomes public; the dense search keeps its HNSW index."""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit
from uuid import uuid4

import asyncpg
import numpy as np
import pytest

from tests.store_helpers import DIM, MODEL, record, unit_vector, without_statistics
from tools.access import NOBODY, READER_ROLE, UNRESTRICTED, Access, AccessError, caller_access, document_groups
from tools.errors import StoreError
from tools.records import DocumentRecord
from tools.scope import SearchScope
from tools.store import VectorStore, pools, search
from tools.store.answer_cache import PostgresAnswerCache

pytestmark = pytest.mark.stack

ODD = "q\"uo\\te,co'mma"
"""A group name with a double quote, a backslash, a comma and a single quote."""

ENG = caller_access(["eng"])
OPS = caller_access(["ops"])
ODD_READER = caller_access([ODD])


def grouped(doc_id: str, texts: list[str], groups: object) -> DocumentRecord:
    """`record(doc_id, texts)` whose metadata names `groups` (and a key that stays)."""
    return dataclasses.replace(record(doc_id, texts), metadata={"groups": groups, "team": "x"})


@pytest.fixture
async def store(fresh_db: str) -> AsyncIterator[VectorStore]:
    """A store of four documents: `public` (no groups), `eng` (list), `ops` (comma-separated string), `odd`."""
    async with VectorStore(fresh_db, MODEL, DIM) as store:
        await store.add_documents(
            [
                record("public", ["zebra public stripes", "zebra okapi"]),
                grouped("eng", ["zebra engine manual", "zebra turbine"], ["eng"]),
                grouped("ops", ["zebra operations runbook"], "ops, oncall"),
                grouped("odd", ["zebra oddity"], [ODD]),
            ]
        )
        yield store


def scope(access: Access) -> SearchScope:
    return SearchScope().read_by(access)


async def restricted_rows(store: VectorStore, access: Access, sql: str) -> list[asyncpg.Record]:
    """`sql` run in a read transaction started as the store starts a restricted read."""
    async with pools.transaction(store.pool, 5.0, "test", f"BEGIN READ ONLY; {access.set_local_sql()}") as conn:
        return list(await conn.fetch(sql))


async def readable_everywhere(store: VectorStore, access: Access) -> set[str]:
    """The doc ids each read path returns for `access`; asserts every path agrees."""
    seen: list[set[str]] = []
    query = unit_vector(1)
    stored = [d.doc_id for d in await store.list_documents()]
    for exact in (False, True):
        seen.append({h.doc_id for h in await store.dense_search(query, 50, exact=exact, scope=scope(access))})
    for rank in ("bm25", "bm25_exhaustive", "ts_rank_cd"):
        hits = await store.full_text_search("zebra", 50, rank=rank, scope=scope(access))
        seen.append({h.doc_id for h in hits})
    seen.append({h.doc_id for h in await store.weighted_full_text_search({"zebra": 1.0}, 50, scope=scope(access))})
    seen.append({d for d in stored if await store.get_document(d, scope(access))})
    seen.append({d for d in stored if await store.find_documents(d, access=access)})
    seen.append({d for d in stored if await store.chunk_metadata(d, f"{d}#0", access=access)})
    seen.append({d.doc_id for d in await store.list_documents(access=access)})
    page = await store.document_page(50, access=access)
    seen.append({d.doc_id for d in page.documents})
    seen.append({d.doc_id async for d in store.iter_documents(2, access=access)})
    counted = await store.count(access=access)
    assert counted[0] == len(seen[0]) and page.total == len(seen[0])
    assert await store.collection_counts(access=access) == ({"default": len(seen[0])} if seen[0] else {})
    for found in seen[1:]:
        assert found == seen[0], seen
    return seen[0]


async def test_each_read_path_returns_only_documents_the_reader_may_read(store: VectorStore) -> None:
    assert await readable_everywhere(store, NOBODY) == {"public"}
    assert await readable_everywhere(store, ENG) == {"public", "eng"}
    assert await readable_everywhere(store, OPS) == {"public", "ops"}
    assert await readable_everywhere(store, caller_access(["oncall"])) == {"public", "ops"}
    assert await readable_everywhere(store, ODD_READER) == {"public", "odd"}
    assert await readable_everywhere(store, caller_access(["q"])) == {"public"}  # a part of the odd name is not it
    assert await readable_everywhere(store, UNRESTRICTED) == {"public", "eng", "ops", "odd"}
    assert await store.count(access=ENG) == (2, 4)


async def test_a_restricted_bm25_top_k_is_the_head_of_its_full_ranking(store: VectorStore) -> None:
    """A small top_k takes the store's top postings scored among the reader's chunks (no filtered read); it must
    equal the head of the reader's full ranking, and never hold another group's chunk."""
    for access in (NOBODY, ENG, OPS, ODD_READER, caller_access(["q"])):
        full = [h.chunk_id for h in await store.full_text_search("zebra", 50, rank="bm25", scope=scope(access))]
        for top_k in (1, 2, 3):
            head = [h.chunk_id for h in await store.full_text_search("zebra", top_k, rank="bm25", scope=scope(access))]
            assert head == full[:top_k], (access, top_k, head, full)


async def test_a_statement_without_any_filter_still_returns_no_row_of_another_group(store: VectorStore) -> None:
    for access, expected in ((NOBODY, {"public"}), (ENG, {"public", "eng"}), (ODD_READER, {"public", "odd"})):
        documents = await restricted_rows(store, access, "SELECT * FROM documents")
        chunks = await restricted_rows(store, access, "SELECT c.chunk_id FROM chunks c")
        assert {r["doc_id"] for r in documents} == expected
        assert {r["chunk_id"].partition("#")[0] for r in chunks} == expected
    assert {r["doc_id"] for r in await restricted_rows(store, UNRESTRICTED, "SELECT * FROM documents")} == {
        "public",
        "eng",
        "ops",
        "odd",
    }


async def test_a_missing_or_empty_setting_reads_no_row(store: VectorStore) -> None:
    for begin in (
        f"BEGIN READ ONLY; SET LOCAL ROLE {READER_ROLE}",
        f"BEGIN READ ONLY; SET LOCAL ROLE {READER_ROLE}; SET LOCAL rag.groups = ''",
    ):
        async with pools.transaction(store.pool, 5.0, "test", begin) as conn:
            assert await conn.fetchval("SELECT count(*) FROM documents") == 0
            assert await conn.fetchval("SELECT count(*) FROM chunks") == 0
            assert await conn.fetchval("SELECT count(*) FROM answer_cache") == 0


async def test_groups_are_stored_apart_from_metadata_and_copied_onto_chunks(store: VectorStore) -> None:
    rows = await store.pool.fetch(
        "SELECT d.doc_id, d.groups, d.metadata, array_agg(DISTINCT c.groups) AS chunk_groups "
        "FROM documents d JOIN chunks c ON c.document_id = d.id GROUP BY d.id ORDER BY d.doc_id"
    )
    stored = {r["doc_id"]: (list(r["groups"]), json.loads(r["metadata"])) for r in rows}
    assert stored["eng"] == (["eng"], {"team": "x"})
    assert stored["ops"] == (["oncall", "ops"], {"team": "x"})
    assert stored["odd"] == ([ODD], {"team": "x"})
    assert stored["public"] == (["everyone"], {})
    assert all(r["chunk_groups"] == [r["groups"]] for r in rows)


async def test_an_invalid_group_is_refused_naming_the_document_and_nothing_is_stored(store: VectorStore) -> None:
    with pytest.raises(AccessError, match=r"document 'bad'.*group 'a\\x00b'"):
        await store.add_documents([record("fine", ["zebra fine"]), grouped("bad", ["zebra bad"], ["a\x00b"])])
    with pytest.raises(AccessError, match=r"document 'bad2'.*expected a list of group names"):
        await store.add_documents([grouped("bad2", ["zebra bad"], {"eng": True})])
    assert not await store.find_documents("fine") and not await store.find_documents("bad")


async def test_set_document_groups_moves_a_document_and_invalidates_cached_answers(store: VectorStore) -> None:
    cache = PostgresAnswerCache(store, ttl_s=3600, max_entries=100)
    looked = await cache.lookup("d" * 64, ["default"], access=ENG)
    await cache.store(looked.key, {"answer": "cached"}, access=ENG)
    assert (await cache.lookup("d" * 64, ["default"], access=ENG)).answer == {"answer": "cached"}
    assert await store.set_document_groups("eng", ["ops"]) is True
    assert await readable_everywhere(store, ENG) == {"public"}
    assert await readable_everywhere(store, OPS) == {"public", "ops", "eng"}
    assert (await cache.lookup("d" * 64, ["default"], access=ENG)).answer is None  # the version moved
    assert await store.set_document_groups("missing", ["ops"]) is False
    assert await store.set_document_groups("eng", []) is True  # none: public
    assert await readable_everywhere(store, NOBODY) == {"public", "eng"}
    with pytest.raises(AccessError):
        await store.set_document_groups("eng", [" "])


async def test_re_ingesting_the_same_content_with_other_groups_sets_them(store: VectorStore) -> None:
    counts = await store.add_documents([grouped("eng", ["zebra engine manual", "zebra turbine"], ["ops"])])
    assert (counts.added, counts.skipped) == (0, 1)
    assert await readable_everywhere(store, OPS) == {"public", "ops", "eng"}


async def test_a_cached_answer_is_seen_only_by_its_own_permission_set(store: VectorStore) -> None:
    cache = PostgresAnswerCache(store, ttl_s=3600, max_entries=100)
    for access in (ENG, OPS, UNRESTRICTED):
        looked = await cache.lookup(f"{access.key:0>64}"[:64], None, access=access)
        await cache.store(looked.key, {"answer": access.key}, access=access)
    seen = await restricted_rows(store, ENG, "SELECT answer FROM answer_cache")
    assert [json.loads(r["answer"]) for r in seen] == [{"answer": ENG.key}]
    assert await cache.entries() == 3


async def test_an_old_store_keeps_its_rows_and_makes_them_public(fresh_db: str) -> None:
    async with VectorStore(fresh_db, MODEL, DIM) as store:
        await store.add_documents([record("old", ["zebra old"])])
    conn = await asyncpg.connect(fresh_db)
    try:  # the store as an earlier version left it: no groups, no policies
        await conn.execute(
            "ALTER TABLE documents DISABLE ROW LEVEL SECURITY; ALTER TABLE chunks DISABLE ROW LEVEL SECURITY;"
            "DROP POLICY documents_read_v1 ON documents; DROP POLICY chunks_read_v1 ON chunks;"
            "ALTER TABLE documents DROP COLUMN groups; ALTER TABLE chunks DROP COLUMN groups;"
            "DROP POLICY answer_cache_own_v1 ON answer_cache; ALTER TABLE answer_cache DROP COLUMN access_key;"
            f"CREATE POLICY documents_read_v0 ON documents FOR SELECT TO {READER_ROLE} USING (true)"  # stale, open
        )
    finally:
        await conn.close()
    async with VectorStore(fresh_db, MODEL, DIM) as store:
        assert await readable_everywhere(store, NOBODY) == {"old"}
        assert [d.doc_id for d in await store.list_documents()] == ["old"]
        assert await store.set_document_groups("old", ["eng"])
        assert await readable_everywhere(store, NOBODY) == set()  # the stale open policy is gone
        assert await readable_everywhere(store, ENG) == {"old"}


async def test_the_restricted_dense_search_still_scans_the_hnsw_index(fresh_db: str) -> None:
    async with VectorStore(fresh_db, MODEL, DIM) as store:
        await without_statistics(store)
        docs = [grouped(f"d{i:04d}", [f"zebra {i}"], ["eng"] if i % 2 else []) for i in range(1500)]
        await store.add_documents(docs)
        query = unit_vector(7)
        hits = await store.dense_search(query, 10, scope=scope(ENG))
        assert len(hits) == 10
        begin = f"{store.search_settings()}; {ENG.set_local_sql()}"
        async with pools.transaction(store.pool, 5.0, "explain", f"BEGIN READ ONLY; {begin}") as conn:
            plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {search.DENSE_SQL}", np.asarray(query), 10))
        assert "chunks_embedding_hnsw" in plan, plan


async def test_a_store_user_that_is_not_a_superuser_reads_restricted_through_the_reading_role(
    postgres_url: str,
) -> None:
    app = f"rag_app_{uuid4().hex[:10]}"
    admin = await asyncpg.connect(postgres_url)
    try:
        await admin.execute(
            f"DO $$ BEGIN CREATE ROLE {READER_ROLE} NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;"
            f"CREATE ROLE {app} LOGIN"
        )
        await admin.execute(f'CREATE DATABASE "{app}" OWNER {app}')
        async with scratch_extension(postgres_url, app):
            url = as_user(postgres_url, app, app)
            with pytest.raises(StoreError, match=f"GRANT {READER_ROLE} TO"):  # not a member, and may not grant it
                await VectorStore(url, MODEL, DIM).connect()
            await admin.execute(f"GRANT {READER_ROLE} TO {app}")
            async with VectorStore(url, MODEL, DIM) as store:  # the tables' owner: writes, unrestricted reads
                await store.add_documents([grouped("eng", ["zebra eng"], ["eng"]), record("public", ["zebra"])])
                assert await readable_everywhere(store, NOBODY) == {"public"}
                assert await readable_everywhere(store, ENG) == {"public", "eng"}
                assert await readable_everywhere(store, UNRESTRICTED) == {"public", "eng"}
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{app}" WITH (FORCE)')
        await admin.execute(f"DROP OWNED BY {app}; DROP ROLE IF EXISTS {app}")
        await admin.close()


@asynccontextmanager
async def scratch_extension(postgres_url: str, *databases: str) -> AsyncIterator[None]:
    """The `vector` extension created in `databases` by the superuser (a plain user may not create it)."""
    for name in databases:
        conn = await asyncpg.connect(as_user(postgres_url, None, name))
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        finally:
            await conn.close()
    yield


def as_user(postgres_url: str, user: str | None, database: str) -> str:
    """`postgres_url` for `user` (None: its own) on `database`."""
    parts = urlsplit(postgres_url)
    netloc = parts.netloc if user is None else f"{user}@{parts.netloc.rpartition('@')[2]}"
    return urlunsplit(parts._replace(netloc=netloc, path=f"/{database}"))


async def test_random_documents_and_readers_agree_with_access_readable_on_every_path(fresh_db: str) -> None:
    rng = random.Random(20261205)
    pool = ["eng", "ops", ODD, "x,y", "ünï", "everyone"]
    async with VectorStore(fresh_db, MODEL, DIM) as store:
        groups = {f"d{i:02d}": rng.sample(pool, rng.randint(0, 2)) for i in range(24)}
        await store.add_documents([grouped(doc_id, [f"zebra {doc_id}"], g) for doc_id, g in groups.items()])
        stored = {doc_id: document_groups(g) for doc_id, g in groups.items()}
        for _ in range(12):
            access = caller_access(rng.sample(pool, rng.randint(0, 3)))
            expected = {doc_id for doc_id, g in stored.items() if access.readable(g)}
            assert await readable_everywhere(store, access) == expected
            key = await restricted_rows(store, access, "SELECT rag_access_key() AS key")
            assert key[0]["key"] == access.key  # the cache policy's digest is Python's `Access.key`
