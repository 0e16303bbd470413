"""The store's schema, created idempotently and migrated when the store connects.

- `rag_meta(key, value)`: the embedder model and dimension the table was built for;
- `documents(id, doc_id, title, source, metadata jsonb, content_hash, ingested_at, collection, groups text[])`,
  UNIQUE (doc_id, collection): a document's identity is (collection, doc_id), so two collections may hold the same
  doc id; `groups` are those allowed to read it (copied onto its chunks' `groups`; row-level security and the
  reading role: `tools.store.access`, set up last, also in a store made before them, whose rows become public);
- `chunks(id, chunk_id UNIQUE (`records.chunk_id`: unique across collections), document_id -> documents,
  chunk_index, text, token_count, embedding vector(dim), metadata jsonb (page or section path), tsv tsvector set
  by the `chunks_tsv` trigger from the text in its document's language's text search configuration, its CJK runs
  as character bigrams (`FULL_TEXT_SQL`))`, an HNSW
  index (`vector_cosine_ops`, pgvector 0.8) on `embedding` and a GIN index on `tsv`;
- the BM25 tables of `tools.bm25` (corpus statistics, lexicon, impact-ordered postings);
- the conversation tables (`CONVERSATIONS_SQL`: `conversations`, `conversation_turns`), read and written by
  `tools.store.conversations`;
- the corpus versions and the answer cache (`ANSWER_CACHE_SQL`): `collection_versions(collection, version,
  changed_at)`, bumped by a trigger on `documents` for every inserted, updated or deleted row, and
  `answer_cache(key, answer jsonb, created_at, hits)`, read and written by `tools.store.answer_cache`;
- the answer records and their ratings (`FEEDBACK_SQL`: `answer_records`, `feedback`), read and written by
  `tools.store.feedback`.
"""

from __future__ import annotations

from tools import bm25
from tools.access import PUBLIC_GROUP
from tools.errors import StoreError
from tools.language import DEFAULT_CONFIG, TEXT_SEARCH_CONFIGS
from tools.scope import DEFAULT_COLLECTION
from tools.store import access
from tools.store.records import Conn

MAX_HNSW_DIM = 2000
"""Most dimensions pgvector's HNSW index takes for the `vector` type (pgvector 0.8 README)."""

SCHEMA_LOCK = 4242
"""Advisory lock key that serialises concurrent schema set-up."""

CONVERSATIONS_SQL = """
CREATE TABLE IF NOT EXISTS conversations (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner text,  -- the API key id that owns it; NULL: made without a key or with the admin key (tenancy scopes by it)
    title text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS conversations_recent ON conversations (updated_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS conversations_owner_recent ON conversations (owner, updated_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS conversation_turns (
    conversation_id uuid NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    n integer NOT NULL,
    question text NOT NULL,
    answer text,  -- NULL: reserved for a question whose answer is not done yet (invisible to reads)
    citations jsonb NOT NULL DEFAULT '[]',
    refused boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, n)
);
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'conversation_turns'::regclass AND attname = 'answer'
               AND attnotnull) THEN
        ALTER TABLE conversation_turns ALTER COLUMN answer DROP NOT NULL;  -- stores made before reserved turns
    END IF;
END $$;
"""
"""The conversation tables, idempotent (run by `set_up` at every connect; read and written by
`tools.store.conversations`). `owner` is the API key id (nullable) that the HTTP API's caller identity scopes
conversations by."""


FEEDBACK_SQL = """
CREATE TABLE IF NOT EXISTS answer_records (
    answer_id uuid PRIMARY KEY,
    owner text,  -- the API key id that asked; NULL: no key or the admin key (tenancy scopes by it)
    collections text[] NOT NULL DEFAULT '{}',
    record jsonb NOT NULL,  -- tools.feedback.AnswerRecord
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS answer_records_created ON answer_records (created_at);
CREATE TABLE IF NOT EXISTS feedback (
    answer_id uuid PRIMARY KEY REFERENCES answer_records (answer_id) ON DELETE CASCADE,
    rating text NOT NULL CHECK (rating IN ('up', 'down')),
    comment text,
    right_source text,
    rated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS feedback_rated ON feedback (rated_at DESC);
"""
"""What the service answered and how it was rated (`tools.store.feedback`); idempotent, run at every connect after
`ANSWER_CACHE_SQL` (the records read `collection_versions`)."""

ANSWER_CACHE_SQL = """
CREATE TABLE IF NOT EXISTS collection_versions (
    collection text PRIMARY KEY,
    version bigint NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION bump_collection_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO collection_versions AS v (collection, version) VALUES (OLD.collection, 1)
        ON CONFLICT (collection) DO UPDATE SET version = v.version + 1, changed_at = clock_timestamp();
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.collection IS DISTINCT FROM OLD.collection) THEN
        INSERT INTO collection_versions AS v (collection, version) VALUES (NEW.collection, 1)
        ON CONFLICT (collection) DO UPDATE SET version = v.version + 1, changed_at = clock_timestamp();
    END IF;
    RETURN NULL;
END $$;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'documents_collection_version'
                   AND tgrelid = 'documents'::regclass) THEN
        CREATE CONSTRAINT TRIGGER documents_collection_version AFTER INSERT OR UPDATE OR DELETE ON documents
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bump_collection_version();
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS answer_cache (
    key text PRIMARY KEY,  -- sha256 hex of the request digest and the scope's collection versions
    answer jsonb NOT NULL,  -- the AskResult's JSON, citations included
    created_at timestamptz NOT NULL DEFAULT now(),
    hits bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS answer_cache_created ON answer_cache (created_at);
"""
"""The corpus versions and the answer cache, idempotent (run by `set_up` at every connect).

`collection_versions` holds one counter per collection that has ever held a document. The trigger is a deferred
constraint trigger: it runs at the commit of the writing transaction (`changed_at` is then about the commit time, which
the read-replica rule of `tools.store.answer_cache` relies on) and bumps the counter once per inserted, updated or
deleted `documents` row; chunks change only with their document's row (a replace deletes and inserts it), so every
ingest, replace and delete moves the version of each collection it touched. Counters never go down and rows are
never deleted."""


async def set_up(conn: Conn, model_name: str, dim: int, k1: float, b: float) -> str:
    """Create the extension and schema if missing and check the stored embedder, in one transaction on `conn`.

    Returns:
        The schema of pgvector's `vector` type (for the connections' codec).

    Raises:
        StoreError: the `vector` extension sits in a schema that is not on the search path (names it); or the
            table was built for another embedder model or dimension, also an existing `chunks` table without
            `rag_meta` (names both). Nothing is written then.
    """
    async with conn.transaction():
        await conn.execute(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        vector_schema = await _vector_schema(conn)
        await conn.execute("CREATE TABLE IF NOT EXISTS rag_meta (key text PRIMARY KEY, value text NOT NULL)")
        rows = await conn.fetch("SELECT key, value FROM rag_meta")
        stored: dict[str, str] = {r["key"]: r["value"] for r in rows}
        if stored and (stored.get("embedder_model"), stored.get("dim")) != (model_name, str(dim)):
            raise StoreError(
                f"the store holds embeddings of model {stored.get('embedder_model')!r} "
                f"(dim {stored.get('dim')}); the configured embedder is {model_name!r} (dim {dim}). "
                f"Use another database or re-create this one."
            )
        if not stored:
            await _check_existing_chunks(conn, model_name, dim)
            await conn.executemany(
                "INSERT INTO rag_meta (key, value) VALUES ($1, $2)",
                [("embedder_model", model_name), ("dim", str(dim))],
            )
            await conn.execute(schema_sql(dim))
        await _migrate(conn, k1, b)
        await access.set_up(conn)
    return vector_schema


_CONFIG_CASES = (
    " ".join(f"WHEN language = '{code}' THEN '{config}'" for code, config in sorted(TEXT_SEARCH_CONFIGS.items()))
    + f" WHEN language IS NULL OR language = '' THEN '{DEFAULT_CONFIG}' ELSE 'simple'"
)
"""`tools.language.text_search_config` as SQL CASE arms (from its table: one source for both)."""

_CJK_CLASS = "[\\u3040-\\u30ff\\u3400-\\u4dbf\\u4e00-\\u9fff\\uac00-\\ud7af\\uf900-\\ufaff]"
"""Han, kana and Hangul (as `tools.language`), as a Postgres regular expression class."""

FULL_TEXT_SQL = f"""
CREATE OR REPLACE FUNCTION cjk_bigrams(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    run text;
    out text;
BEGIN
    IF t !~ '{_CJK_CLASS}' THEN
        RETURN t;
    END IF;
    out := regexp_replace(t, '{_CJK_CLASS}+', ' ', 'g');
    FOR run IN SELECT m[1] FROM regexp_matches(t, '({_CJK_CLASS}+)', 'g') AS m LOOP
        IF length(run) = 1 THEN
            out := out || ' ' || run;
        ELSE
            FOR i IN 1 .. length(run) - 1 LOOP
                out := out || ' ' || substr(run, i, 2);
            END LOOP;
        END IF;
    END LOOP;
    RETURN out;
END $$;
CREATE OR REPLACE FUNCTION text_search_config(language text) RETURNS regconfig LANGUAGE sql IMMUTABLE
    PARALLEL SAFE AS $$ SELECT (CASE {_CONFIG_CASES} END)::regconfig $$;
CREATE OR REPLACE FUNCTION chunks_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    doc record;
BEGIN
    SELECT d.metadata->>'language' AS language, d.groups INTO doc FROM documents d WHERE d.id = NEW.document_id;
    NEW.tsv := to_tsvector(text_search_config(doc.language), cjk_bigrams(NEW.text));
    IF TG_OP = 'INSERT' THEN
        NEW.groups := coalesce(doc.groups, NEW.groups);
    END IF;
    RETURN NEW;
END $$;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'chunks_tsv' AND tgrelid = 'chunks'::regclass) THEN
        CREATE TRIGGER chunks_tsv BEFORE INSERT OR UPDATE OF text ON chunks
            FOR EACH ROW EXECUTE FUNCTION chunks_tsv();
    END IF;
END $$;
"""
"""Full text in any language: a chunk's `tsv` is `to_tsvector(text_search_config(its document's language),
cjk_bigrams(its text))`, set by a trigger on every insert (COPY included), which also copies the document's
`groups` onto an inserted chunk (row-level security, `tools.store.access`); the language is the document's
`language` metadata (ISO 639-1, detected at ingest: `tools.ingest.documents.SourceDocument.stored_metadata`), its
configuration `tools.language.text_search_config`'s, written here as SQL from the same table. `cjk_bigrams` keeps
the text but its runs of Han, kana and Hangul, which it writes as their overlapping character bigrams (a run of one
character as itself): Chinese and Japanese write no spaces, so a whole run would be one lexeme that no query's run
matches (the standard CJK analysis of full-text engines: Lucene's CJKBigramFilter). Queries are analysed the same
way (`tools.store.search.query_lexemes`)."""


async def _full_text(conn: Conn) -> None:
    """The per-language full text (`FULL_TEXT_SQL`): in a store made before it, the generated English `tsv` becomes
    a plain column (values kept: the stored chunks stay English-analysed until re-ingested; Postgres 13+ `DROP
    EXPRESSION`), set from now on by the trigger."""
    generated = await conn.fetchval(
        "SELECT attgenerated = 's' FROM pg_attribute WHERE attrelid = 'chunks'::regclass AND attname = 'tsv'"
    )
    if generated:  # (ALTER TABLE locks the table whole: only when there is something to change)
        await conn.execute("ALTER TABLE chunks ALTER COLUMN tsv DROP EXPRESSION")
    await conn.execute(FULL_TEXT_SQL)


async def _migrate(conn: Conn, k1: float, b: float) -> None:
    """Bring a store made by an earlier version up to this schema (inside `set_up`'s locked transaction): the
    `ingested_at` column, the chunks' `metadata` column, the `source` index, the documents' `collection` column
    (`tools.scope.DEFAULT_COLLECTION` for every stored document) and its index, the per-language full text
    (`_full_text`), the BM25 tables (built from the
    stored chunks when new), the conversation tables, the corpus versions, the answer cache and the feedback tables."""
    has_ingested_at = await conn.fetchval(
        "SELECT 1 FROM pg_attribute WHERE attrelid = 'documents'::regclass AND attname = 'ingested_at'"
    )
    if not has_ingested_at:
        await conn.execute("ALTER TABLE documents ADD COLUMN ingested_at timestamptz NOT NULL DEFAULT now()")
    await conn.execute("ALTER TABLE chunks ADD COLUMN IF NOT EXISTS metadata jsonb NOT NULL DEFAULT '{}'")
    if await conn.fetchval("SELECT to_regclass('documents_source')") is None:
        await conn.execute("CREATE INDEX documents_source ON documents (source)")
    await conn.execute(
        f"ALTER TABLE documents ADD COLUMN IF NOT EXISTS collection text NOT NULL DEFAULT '{DEFAULT_COLLECTION}'"
    )
    await conn.execute("CREATE INDEX IF NOT EXISTS documents_collection ON documents (collection)")
    await _unique_per_collection(conn)
    await _full_text(conn)
    if await conn.fetchval("SELECT to_regclass('bm25_corpus')") is None:
        await conn.execute(bm25.SCHEMA_SQL)
        await bm25.rebuild(conn, k1, b)
    await conn.execute(CONVERSATIONS_SQL)
    await conn.execute(ANSWER_CACHE_SQL)
    await conn.execute(FEEDBACK_SQL)


async def _unique_per_collection(conn: Conn) -> None:
    """Replace a store's `UNIQUE (doc_id)` (versions before collections) by `UNIQUE (doc_id, collection)`: the same
    doc id may then live in several collections. The new index also serves keyset listings (doc_id, collection)."""
    if await conn.fetchval("SELECT to_regclass('documents_doc_id_collection_key')") is None:
        await conn.execute(
            "ALTER TABLE documents ADD CONSTRAINT documents_doc_id_collection_key UNIQUE (doc_id, collection)"
        )
    await conn.execute("ALTER TABLE documents DROP CONSTRAINT IF EXISTS documents_doc_id_key")


async def _vector_schema(conn: Conn) -> str:
    """The schema of pgvector's `vector` type. Raises StoreError, naming it, when it is not on the search path
    (the schema's unqualified `vector(dim)`, `<=>` and `vector_cosine_ops` would not resolve)."""
    row = await conn.fetchrow(
        """
        SELECT n.nspname AS schema, n.nspname = ANY (current_schemas(false)) AS visible
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE t.typname = 'vector' ORDER BY visible DESC LIMIT 1
        """
    )
    if row is None:
        raise StoreError("the `vector` extension is not installed and could not be created; install pgvector")
    if not row["visible"]:
        raise StoreError(
            f"the `vector` extension is in schema {row['schema']!r}, which is not on the search path "
            f"({await conn.fetchval('SHOW search_path')}); add it, e.g. "
            f"`ALTER DATABASE ... SET search_path = public, {row['schema']}`, or the query parameter "
            f"`search_path=public,{row['schema']}` in DATABASE_URL"
        )
    return str(row["schema"])


async def _check_existing_chunks(conn: Conn, model_name: str, dim: int) -> None:
    """A `chunks` table made without `rag_meta` (another tool, an old version) must hold `vector(dim)` embeddings;
    raises StoreError naming the column's type otherwise, before anything is written."""
    column = await conn.fetchval(
        """
        SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
        WHERE a.attrelid = to_regclass('chunks') AND a.attname = 'embedding' AND NOT a.attisdropped
        """
    )
    if column is not None and column.rsplit(".", 1)[-1] != f"vector({dim})":
        raise StoreError(
            f"the existing `chunks` table stores embeddings as {column}; the configured embedder {model_name!r} "
            f"needs vector({dim}). Use another database or re-create this one."
        )


def schema_sql(dim: int) -> str:
    """The `documents` and `chunks` tables and their indexes for `dim`-wide embeddings."""
    return f"""
    CREATE TABLE IF NOT EXISTS documents (
        id bigserial PRIMARY KEY,
        doc_id text NOT NULL,
        title text NOT NULL DEFAULT '',
        source text NOT NULL DEFAULT '',
        metadata jsonb NOT NULL DEFAULT '{{}}',
        content_hash text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        ingested_at timestamptz NOT NULL DEFAULT now(),
        collection text NOT NULL DEFAULT '{DEFAULT_COLLECTION}',
        groups text[] NOT NULL DEFAULT '{{{PUBLIC_GROUP}}}',
        CONSTRAINT documents_doc_id_collection_key UNIQUE (doc_id, collection)
    );
    CREATE TABLE IF NOT EXISTS chunks (
        id bigserial PRIMARY KEY,
        chunk_id text NOT NULL UNIQUE,
        document_id bigint NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        chunk_index integer NOT NULL,
        text text NOT NULL,
        token_count integer NOT NULL,
        embedding vector({dim}) NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{{}}',
        tsv tsvector,
        groups text[] NOT NULL DEFAULT '{{{PUBLIC_GROUP}}}',
        UNIQUE (document_id, chunk_index)
    );
    CREATE INDEX IF NOT EXISTS chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops);
    CREATE INDEX IF NOT EXISTS chunks_tsv_gin ON chunks USING gin (tsv);
    """
