"""Okapi BM25 over the chunks' `tsvector`s with corpus statistics kept in Postgres and impact-ordered postings.

Tables (created by `VectorStore.connect`, maintained inside every ingest, replace and delete transaction):

- `bm25_corpus(chunks, sum_dl)`: one row, N = number of chunks and the sum of their lengths (dl = the chunk's
  `token_count`, embedder tokens; only dl / avgdl enters the score);
- `bm25_lexicon(lexeme, df)`: chunks containing each `english` lexeme;
- `bm25_postings(chunk, lexeme, tf, dl, impact)`: one row per (chunk, distinct lexeme), tf = the lexeme's
  occurrences in the chunk's `tsvector`, and `impact` = the term-frequency part of BM25,
  tf / (tf + k1 (1 - b + b dl / avgdl)), with the avgdl of the corpus when the row was written. A b-tree on
  (lexeme, impact DESC) lets a query read only a term's top-M postings.

Scoring (Lucene's BM25; Robertson and Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", 2009):
score(chunk) = sum over the query's distinct lexemes t of idf(t) * tf / (tf + k1 (1 - b + b dl / avgdl)),
idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)), with the CURRENT N, avgdl and df from the tables above.

Impact-ordered, pruned evaluation (Anh and Moffat, "Impact transformations: effective and efficient web
retrieval", SIGIR 2002; "Pruned query evaluation using pre-computed impacts", SIGIR 2006): within one lexeme, idf
is a constant, so ordering its postings by the stored tf-part orders them by their BM25 contribution. A query
reads the top `M` postings of each of its terms (candidates), ranks the candidates by the partial score those
postings give (idf x stored impact over the terms whose top M hold the chunk), then scores the best max(M, top_k)
of them exactly on all query terms with the current statistics (one index probe per candidate and term). Rows read
per query are bounded by terms x M + max(M, top_k) x terms, whatever the corpus size. The approximations: a chunk
in no term's top M is not found; a candidate whose partial score is outside the best max(M, top_k) is not scored;
and the stored impacts use the avgdl, k1 and b of ingest time, which only affects which postings count as a
term's top M and the partial order, never a returned chunk's score. `rebuild` recomputes every impact with the
current avgdl.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.store.records import Conn

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS bm25_corpus (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    chunks bigint NOT NULL,
    sum_dl bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS bm25_lexicon (
    lexeme text PRIMARY KEY,
    df integer NOT NULL
);
CREATE TABLE IF NOT EXISTS bm25_postings (
    chunk bigint NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    lexeme text NOT NULL,
    tf integer NOT NULL,
    dl integer NOT NULL,
    impact real NOT NULL,
    PRIMARY KEY (chunk, lexeme)
);
CREATE INDEX IF NOT EXISTS bm25_postings_impact ON bm25_postings (lexeme, impact DESC, chunk);
"""
"""The BM25 tables; run after the `chunks` table exists."""


def _impact(k1: str, b: str) -> str:
    """The stored tf-part of BM25 in SQL, `k1` and `b` naming query parameters."""
    return f"tf::float8 / (tf + {k1}::float8 * (1 - {b}::float8 + {b}::float8 * dl / avgdl))"


async def add_chunks(conn: Conn, document_ids: list[int], k1: float, b: float) -> None:
    """Count the chunks of documents `document_ids` (primary keys, chunks already inserted) into the statistics
    and write their postings; inside the caller's transaction, after `VectorStore`'s writer lock."""
    await conn.execute(
        f"""
        WITH new AS (
            SELECT c.id, c.token_count, c.tsv FROM chunks c WHERE c.document_id = ANY($1::bigint[])
        ), corpus AS (
            UPDATE bm25_corpus SET chunks = chunks + (SELECT count(*) FROM new),
                sum_dl = sum_dl + (SELECT coalesce(sum(token_count), 0) FROM new)
            RETURNING greatest(sum_dl::float8 / greatest(chunks, 1), 1) AS avgdl
        ), rows AS (
            SELECT n.id AS chunk, u.lexeme, greatest(cardinality(u.positions), 1) AS tf, n.token_count AS dl
            FROM new n CROSS JOIN LATERAL unnest(n.tsv) AS u
        )
        INSERT INTO bm25_postings (chunk, lexeme, tf, dl, impact)
        SELECT r.chunk, r.lexeme, r.tf, r.dl, {_impact("$2", "$3")}
        FROM rows r CROSS JOIN corpus
        """,
        document_ids,
        k1,
        b,
    )
    await conn.execute(
        """
        INSERT INTO bm25_lexicon (lexeme, df)
        SELECT u.lexeme, count(*) FROM chunks c CROSS JOIN LATERAL unnest(c.tsv) AS u
        WHERE c.document_id = ANY($1::bigint[])
        GROUP BY u.lexeme ORDER BY u.lexeme
        ON CONFLICT (lexeme) DO UPDATE SET df = bm25_lexicon.df + excluded.df
        """,
        document_ids,
    )


async def remove_chunks(conn: Conn, document_ids: list[int]) -> None:
    """Take the chunks of documents `document_ids` out of the statistics, before they are deleted (their postings
    go with them, ON DELETE CASCADE); inside the caller's transaction, after the writer lock."""
    emptied = await conn.fetch(
        """
        UPDATE bm25_lexicon l SET df = l.df - x.n
        FROM (
            SELECT p.lexeme, count(*) AS n
            FROM chunks c JOIN bm25_postings p ON p.chunk = c.id
            WHERE c.document_id = ANY($1::bigint[])
            GROUP BY p.lexeme ORDER BY p.lexeme
        ) x
        WHERE l.lexeme = x.lexeme
        RETURNING l.lexeme, l.df
        """,
        document_ids,
    )
    await conn.execute(
        "DELETE FROM bm25_lexicon WHERE lexeme = ANY($1::text[]) AND df <= 0",
        [r["lexeme"] for r in emptied if r["df"] <= 0],
    )
    await conn.execute(
        """
        WITH gone AS (SELECT c.token_count FROM chunks c WHERE c.document_id = ANY($1::bigint[]))
        UPDATE bm25_corpus SET chunks = chunks - (SELECT count(*) FROM gone),
            sum_dl = sum_dl - (SELECT coalesce(sum(token_count), 0) FROM gone)
        """,
        document_ids,
    )


async def rebuild(conn: Conn, k1: float, b: float) -> None:
    """Recompute the statistics and every posting (impacts with the current avgdl) from the stored chunks; for a
    store built before these tables existed, or to re-normalise impacts after the corpus has grown a lot."""
    await conn.execute("TRUNCATE bm25_postings, bm25_lexicon, bm25_corpus")
    await conn.execute(
        "INSERT INTO bm25_corpus (chunks, sum_dl) SELECT count(*), coalesce(sum(token_count), 0) FROM chunks"
    )
    await conn.execute(
        f"""
        INSERT INTO bm25_postings (chunk, lexeme, tf, dl, impact)
        SELECT r.chunk, r.lexeme, r.tf, r.dl, {_impact("$1", "$2")}
        FROM (
            SELECT c.id AS chunk, u.lexeme, greatest(cardinality(u.positions), 1) AS tf, c.token_count AS dl
            FROM chunks c CROSS JOIN LATERAL unnest(c.tsv) AS u
        ) r
        CROSS JOIN (SELECT greatest(sum_dl::float8 / greatest(chunks, 1), 1) AS avgdl FROM bm25_corpus) s
        """,
        k1,
        b,
    )
    await conn.execute("INSERT INTO bm25_lexicon (lexeme, df) SELECT lexeme, count(*) FROM bm25_postings GROUP BY 1")


_QUERY_TERMS = "SELECT DISTINCT u.lexeme, 1.0::float8 AS w FROM unnest(to_tsvector('english', cjk_bigrams($1))) AS u"
"""$1 query text: its distinct `english` lexemes (CJK runs as bigrams, `cjk_bigrams`), weight 1 each; the store's
searches analyse a query in each of its languages instead (`tools.store.search.query_lexemes`, weighted form)."""
_WEIGHTED_TERMS = "SELECT t.key AS lexeme, t.value::float8 AS w FROM jsonb_each_text($1::jsonb) AS t"
"""$1 JSON object {lexeme: weight}: stored lexemes (not re-analysed) with their query weights."""


def _terms(weighted: bool) -> str:
    """The query's terms, corpus statistics and per-term idf (times the term's query weight) as CTEs."""
    return f"""
terms AS (
    {_WEIGHTED_TERMS if weighted else _QUERY_TERMS}
), s AS (
    SELECT chunks::float8 AS n, greatest(sum_dl::float8 / greatest(chunks, 1), 1) AS avgdl FROM bm25_corpus
), idf AS MATERIALIZED (
    SELECT l.lexeme, t.w * ln(1 + (s.n - l.df + 0.5) / (l.df + 0.5)) AS idf
    FROM terms t JOIN bm25_lexicon l ON l.lexeme = t.lexeme CROSS JOIN s
)"""


_TERM_SCORE = "i.idf * p.tf / (p.tf + $3::float8 * (1 - $4::float8 + $4::float8 * p.dl / s.avgdl))"


def _hits_sql(scored: str, hit_columns: str, weighted: bool) -> str:
    return f"""
WITH {_terms(weighted)}, {scored}
SELECT {hit_columns}, sc.score
FROM scored sc JOIN chunks c ON c.id = sc.chunk JOIN documents d ON d.id = c.document_id
ORDER BY sc.score DESC, c.id
"""


def pruned_sql(hit_columns: str, where: str | None = None, weighted: bool = False, readable: bool = False) -> str:
    """The pruned query: $1 query text (`weighted`: a JSON object {lexeme: weight}, each term's score contribution
    multiplied by its weight), $2 top_k, $3 k1, $4 b, $5 M (postings read per query term).

    Two stages: the terms' top-M postings give each candidate a partial score from what was read (idf x stored
    impact, summed over the terms in whose top M it is); only the best max(M, top_k) candidates by that partial
    score are scored exactly on every query term (one index probe each). Rescoring every candidate (up to
    terms x M) cost 10.1 ms per SciFact train claim (top_k 100, 12,111 chunks); the best M of them 2.6 ms, with
    nDCG@10 0.6839 against 0.6842 and recall@100 0.902 against 0.910 (809 train claims, 2026-12-05,
    `docs/benchmarks.md`, "Full-text search's cost").

    `readable` (no `where`): each term's top M postings of the whole store, kept when their chunk is one the
    transaction may read (a join on `chunks`, whose row-level security hides the others), before scoring: a
    restricted caller reads the postings as fast as the operator and is ranked among its own chunks only.

    With `where` (a condition on the chunk's document `d`, its parameters from $6; `tools.store.filters`), a
    term's top M are its top M postings of chunks that pass it: the impact-ordered read skips the others, so the
    candidates are as many as without a filter (reading about M / selectivity postings per term)."""
    read = "SELECT p.chunk, p.impact FROM bm25_postings p WHERE p.lexeme = idf.lexeme"
    if where is not None:
        read = (
            "SELECT p.chunk, p.impact FROM bm25_postings p JOIN chunks c ON c.id = p.chunk"
            f" JOIN documents d ON d.id = c.document_id WHERE p.lexeme = idf.lexeme AND {where}"
        )
    visible = " JOIN chunks rc ON rc.id = top.chunk" if readable and where is None else ""
    return _hits_sql(
        f"""
cand AS MATERIALIZED (
    SELECT top.chunk FROM idf
    CROSS JOIN LATERAL (
        {read} ORDER BY p.impact DESC, p.chunk LIMIT $5
    ) AS top{visible}
    GROUP BY top.chunk ORDER BY sum(idf.idf * top.impact) DESC, top.chunk LIMIT greatest($5, $2)
), scored AS (
    SELECT cand.chunk, (
        SELECT sum({_TERM_SCORE})
        FROM bm25_postings p JOIN idf i ON i.lexeme = p.lexeme
        WHERE p.chunk = cand.chunk AND p.lexeme = ANY (q.lexemes)
    ) AS score
    FROM cand CROSS JOIN s CROSS JOIN (SELECT array_agg(lexeme) AS lexemes FROM idf) AS q
    ORDER BY score DESC, cand.chunk LIMIT $2
)""",
        hit_columns,
        weighted,
    )


def exhaustive_sql(hit_columns: str, where: str | None = None, weighted: bool = False) -> str:
    """Every posting of every query term scored (exact BM25, cost grows with the corpus): $1 query text
    (`weighted`: {lexeme: weight} JSON, as in `pruned_sql`), $2 top_k, $3 k1, $4 b.

    With `where` (a condition on the chunk's document `d`, its parameters from $5; `tools.store.filters`), only the
    postings of chunks that pass it are scored: exact BM25 over the filtered set, read through the filtered
    chunks' (chunk, lexeme) keys when the filter is selective. The corpus statistics (N, df, avgdl) stay the
    whole store's, so a chunk scores the same with or without a filter."""
    if where is None:
        postings = "idf i JOIN bm25_postings p ON p.lexeme = i.lexeme CROSS JOIN s"
    else:
        postings = (
            "documents d JOIN chunks c ON c.document_id = d.id JOIN bm25_postings p ON p.chunk = c.id"
            f" JOIN idf i ON i.lexeme = p.lexeme CROSS JOIN s WHERE {where}"
        )
    return _hits_sql(
        f"""
scored AS (
    SELECT p.chunk, sum({_TERM_SCORE}) AS score
    FROM {postings}
    GROUP BY p.chunk ORDER BY score DESC, p.chunk LIMIT $2
)""",
        hit_columns,
        weighted,
    )
