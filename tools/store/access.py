"""Row-level security of the store: who may read which rows, enforced by Postgres (`tools.access`).

A document's `groups` (`text[]`, copied onto each of its chunks) say who may read it. A restricted read transaction
starts with `Access.set_local_sql()`: `SET LOCAL ROLE rag_reader` and the caller's groups in the setting
`rag.groups`. The reading role is subject to the policies below; the tables' owner (the store's login role, used by
writes and the operator's reads) bypasses them (row-level security is enabled, not forced). So a restricted read
never returns a row of a document whose groups do not meet the caller's, whatever its statement's own conditions,
and a transaction whose setting is missing or empty reads no row at all (fail closed).

- `documents`, `chunks`: `groups && rag_groups()` (the setting as `text[]`; NULL when missing, which no row meets;
  `READABLE`);
- `answer_cache`: `access_key = rag_access_key()`: a restricted caller sees and writes only the entries of its own
  permission set (`Access.key`, computed from the setting exactly as in Python);
- `conversation_turns`: a turn whose citations name a chunk the caller cannot read is not returned (its answer was
  written from that chunk; `rag_citations_readable`);
- `answer_records` (and so their ratings, `feedback`, read through them): a record whose retrieved or cited passages
  name a chunk the caller cannot read is not returned.

Set up idempotently at every connect (`set_up`, inside the schema's locked transaction), after the tables exist.
"""

from __future__ import annotations

import asyncpg

from tools.access import GROUPS_SETTING, PUBLIC_GROUP, READER_ROLE
from tools.errors import StoreError
from tools.store.records import Conn

COLUMNS = (
    ("documents", "groups", f"text[] NOT NULL DEFAULT '{{{PUBLIC_GROUP}}}'"),
    ("chunks", "groups", f"text[] NOT NULL DEFAULT '{{{PUBLIC_GROUP}}}'"),
    ("answer_cache", "access_key", "text NOT NULL DEFAULT '*'"),
)
"""(table, column, definition) added to a store made before them: its documents and chunks become public, its
cached answers the operator's (`Access.key` of `UNRESTRICTED`)."""

READER_PRIVILEGES = {
    "documents": "SELECT",
    "chunks": "SELECT",
    "bm25_corpus": "SELECT",
    "bm25_lexicon": "SELECT",
    "bm25_postings": "SELECT",
    "collection_versions": "SELECT",
    "answer_cache": "SELECT, UPDATE",
    "conversations": "SELECT",
    "conversation_turns": "SELECT",
    "answer_records": "SELECT",
    "feedback": "SELECT",
}
"""What a restricted read may do on each table it touches (searches, document reads, listings, counts, the answer
cache's look-up, which counts a hit, conversations, answer records and ratings)."""


FUNCTIONS_SQL = f"""
CREATE OR REPLACE FUNCTION rag_groups() RETURNS text[] LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT NULLIF(current_setting('{GROUPS_SETTING}', true), '')::text[]
$$;
CREATE OR REPLACE FUNCTION rag_access_key() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT left(encode(sha256(convert_to(array_to_string(rag_groups(), E'\\n'), 'UTF8')), 'hex'), 32)
$$;
"""
CITATIONS_SQL = """
CREATE OR REPLACE FUNCTION rag_citations_readable(citations jsonb) RETURNS boolean LANGUAGE sql STABLE
    SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT NOT EXISTS (
        SELECT 1
        FROM jsonb_array_elements(CASE jsonb_typeof(citations) WHEN 'array' THEN citations ELSE '[]' END) AS e
        JOIN chunks k ON k.chunk_id = e->>'chunk_id'
        WHERE NOT coalesce(k.groups && rag_groups(), false)
    )
$$;
"""
"""`rag_citations_readable(citations)`: false when a stored turn's citations (JSON objects with a `chunk_id`) name
a stored chunk the transaction's caller may not read. It runs as the tables' owner (SECURITY DEFINER, its search
path fixed at creation), so it sees every chunk: a cited chunk deleted since does not hide the turn."""

"""`rag_groups()`: the transaction's caller groups (NULL when the setting is missing or empty); `rag_access_key()`:
`tools.access.Access.key` of them (`set_local_sql` writes the groups sorted, so joining them in order is the same
digest)."""

READABLE = "coalesce(groups && (SELECT rag_groups()), false)"
"""The condition on a `documents` or `chunks` row: its groups meet the caller's. The setting is read once per
statement (an uncorrelated sub-select is an InitPlan), so it costs one array overlap per row. `coalesce(..., false)`
is the same truth (NULL, a missing setting, reads nothing) but gives the planner a selectivity of 0.5 where the bare
`&&` against a value unknown at plan time gets 0.005 (`arraycontsel`'s default): with that, an unfiltered dense
search of a restricted caller was planned as a sequential scan and sort instead of the HNSW index scan (measured on
1,500 chunks; `tests/tools/store/test_store_access.py` checks the plan)."""

POLICIES = {
    "documents": ("documents_read_v1", "FOR SELECT", READABLE),
    "chunks": ("chunks_read_v1", "FOR SELECT", READABLE),
    "answer_cache": ("answer_cache_own_v1", "FOR ALL", "access_key = (SELECT rag_access_key())"),
    "conversation_turns": ("conversation_turns_read_v1", "FOR SELECT", "rag_citations_readable(citations)"),
    "answer_records": (
        "answer_records_read_v1",
        "FOR SELECT",
        "rag_citations_readable(coalesce(record->'retrieved', '[]') || coalesce(record->'cited', '[]'))",
    ),
}
"""table -> (policy name, command, condition on its row) for `READER_ROLE`. A name ends in its definition's version:
set-up drops a policy of the table named `<table>_...` under another name, so a changed definition is bumped there."""


async def set_up(conn: Conn) -> None:
    """The reading role, its privileges and the policies (module docstring), idempotent, on `conn` inside the
    schema's transaction. Each change is made only when missing (a connect to a store set up already changes
    nothing, so it takes no table lock that would queue behind or block reads).

    Raises:
        StoreError: the reading role is missing and the login role may not create it, or the login role is not a
            member of it and may not grant itself membership (each names what to run).
    """
    await _reader_role(conn)
    await conn.execute(FUNCTIONS_SQL)
    for table, column, definition in COLUMNS:
        if not await conn.fetchval(
            "SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2 AND NOT attisdropped",
            table,
            column,
        ):
            await conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
    await conn.execute(CITATIONS_SQL)
    schemas = await conn.fetch(
        "SELECT DISTINCT n.nspname FROM pg_namespace n WHERE (n.nspname = current_schema() "
        "OR n.oid = (SELECT extnamespace FROM pg_extension WHERE extname = 'vector')) "
        "AND NOT has_schema_privilege($1, n.oid, 'USAGE')",
        READER_ROLE,
    )
    for row in schemas:
        await conn.execute(f'GRANT USAGE ON SCHEMA "{row["nspname"]}" TO {READER_ROLE}')
    for table, privileges in READER_PRIVILEGES.items():
        if not await conn.fetchval("SELECT has_table_privilege($1, $2, $3)", READER_ROLE, table, privileges):
            await conn.execute(f"GRANT {privileges} ON {table} TO {READER_ROLE}")
    for table, (name, command, condition) in POLICIES.items():
        if not await conn.fetchval("SELECT relrowsecurity FROM pg_class WHERE oid = $1::regclass", table):
            await conn.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        stale = await conn.fetch(
            "SELECT polname FROM pg_policy WHERE polrelid = $1::regclass AND polname LIKE $2 AND polname <> $3",
            table,
            f"{table}\\_%",
            name,
        )
        for row in stale:  # an earlier version's definition (the names carry a version)
            await conn.execute(f'DROP POLICY "{row["polname"]}" ON {table}')
        if not await conn.fetchval(
            "SELECT 1 FROM pg_policy WHERE polname = $1 AND polrelid = $2::regclass", name, table
        ):
            await conn.execute(
                f"CREATE POLICY {name} ON {table} {command} TO {READER_ROLE} USING ({condition})"
                + (f" WITH CHECK ({condition})" if command == "FOR ALL" else "")
            )


async def _reader_role(conn: Conn) -> None:
    """Create `READER_ROLE` (NOLOGIN) when missing (a concurrent creator is fine) and make the login role a member
    of it that may `SET ROLE` to it, unless it is a superuser (which may switch to any role). Postgres 16+ gives the
    creator of a role a membership without the SET option (`createrole_self_grant` empty), hence the explicit grant
    `WITH SET TRUE` (the option is new in 16; before, membership alone allows `SET ROLE`)."""
    if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", READER_ROLE):
        try:
            await conn.execute(
                f"DO $$ BEGIN CREATE ROLE {READER_ROLE} NOLOGIN; "
                "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
            )
        except asyncpg.PostgresError as exc:  # insufficient privilege: say what the operator must run
            raise StoreError(
                f"the store needs the Postgres role {READER_ROLE!r} for restricted reads and could not create it "
                f"({exc}); run `CREATE ROLE {READER_ROLE} NOLOGIN; GRANT {READER_ROLE} TO <the store's user>` as "
                f"a superuser"
            ) from exc
    set_option = int(await conn.fetchval("SELECT current_setting('server_version_num')::int")) >= 160000
    member = await conn.fetchval(
        "SELECT rolsuper OR pg_has_role(current_user, $1, $2) FROM pg_roles WHERE rolname = current_user",
        READER_ROLE,
        "SET" if set_option else "MEMBER",
    )
    if not member:
        try:
            await conn.execute(
                f"GRANT {READER_ROLE} TO CURRENT_USER" + (" WITH SET TRUE, INHERIT FALSE" if set_option else "")
            )
        except asyncpg.PostgresError as exc:
            raise StoreError(
                f"the store's user must be a member of the Postgres role {READER_ROLE!r} to run restricted reads and "
                f"could not make itself one ({exc}); run `GRANT {READER_ROLE} TO <the store's user>` as a superuser"
            ) from exc
