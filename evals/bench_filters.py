"""`rag bench query --filter-selectivity 0.01,0.001`: metadata-filtered search against the exact filtered search,
and filtered against unfiltered latency, on a tagged copy of the stored corpus.

The copy: database `<database>_filtered` on the same Postgres server (the user's store is only read), holding the
stored documents with their chunks and embeddings; each document's metadata gains `bench_match_<s>: true` when it
is chosen for selectivity s: documents in a seeded random order are taken until their chunks reach s x all chunks
(at least one document), so about s of the chunks match `{"bench_match_<s>": true}`. A copy that holds the stored
chunk count and exactly those tags is reused; otherwise it is dropped and rebuilt (`--rebuild-scale` forces it).

Per selectivity, over the SciFact test claims (at most `requests`, each embedded once on Triton), searched one at
a time through the store the app searches with (`agent.core.wiring.build_store`):
- recall@10 of the filtered search the retriever runs against the exact filtered search (dense: `dense_search`
  against `dense_search(exact=True)`, same scope; full text: pruned BM25 against `bm25_exhaustive`, same scope),
  the mean over claims whose exact filtered top 10 is not empty;
- p50 latency (ms) of the filtered and of the unfiltered search of `retrieval_candidates` rows (what a hybrid search
  asks of each leg), and filtered / unfiltered.
Targets (issue 18): recall@10 1.0 at 1 % and 0.1 %, latency within 2x at 12k chunks.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt

from agent.core.wiring import Clients, build_store
from evals.bench_corpus import scaled_database_name, stored_pages
from evals.retrieval_eval import ensure_database
from tools.records import ChunkHit, DocumentRecord
from tools.scope import SearchScope
from tools.stats import percentiles
from tools.store import VectorStore

log = logging.getLogger("evals.bench_query.filters")
"""A child of `evals.bench_query`'s logger, so its progress shows at the level the command sets."""

RECALL_AT = 10
"""Rows compared between the filtered and the exact filtered search."""


def tag_key(selectivity: float) -> str:
    """The metadata key of the documents chosen for `selectivity`, e.g. `bench_match_0.01`."""
    return f"bench_match_{selectivity:g}"


def chosen_documents(
    chunks_per_document: Mapping[str, int], selectivities: Sequence[float], seed: int = 0
) -> dict[float, set[str]]:
    """For each selectivity s (0 < s <= 1), the doc ids whose chunks first reach s x all chunks, documents taken in
    a random order seeded by `seed` (a new order per selectivity); at least one document each.

    Raises:
        ValueError: a selectivity outside (0, 1], or no chunks.
    """
    total = sum(chunks_per_document.values())
    if total <= 0:
        raise ValueError("the store holds no chunks: ingest a corpus first (e.g. `rag ingest` of SciFact)")
    rng = random.Random(seed)
    out: dict[float, set[str]] = {}
    for s in selectivities:
        if not 0 < s <= 1:
            raise ValueError(f"--filter-selectivity {s}: expected a share of chunks in (0, 1], e.g. 0.01")
        order = sorted(chunks_per_document)
        rng.shuffle(order)
        chosen: set[str] = set()
        held = 0
        for doc_id in order:
            if chosen and held >= s * total:
                break
            chosen.add(doc_id)
            held += chunks_per_document[doc_id]
        out[s] = chosen
    return out


def tagged(doc: DocumentRecord, chosen: Mapping[float, set[str]]) -> DocumentRecord:
    """`doc` with `tag_key(s): true` added to its metadata for each selectivity s that chose it."""
    tags = {tag_key(s): True for s, ids in chosen.items() if doc.doc_id in ids}
    if not tags:
        return doc
    return DocumentRecord(doc.doc_id, doc.title, doc.source, doc.content_hash, doc.chunks, doc.metadata | tags)


async def _tag_counts(store: VectorStore, selectivities: Sequence[float]) -> dict[float, int]:
    """Chunks of documents carrying each selectivity's tag."""
    out = {}
    for s in selectivities:
        out[s] = int(
            await store.pool.fetchval(
                "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.metadata ? $1",
                tag_key(s),
            )
        )
    return out


async def build_filtered_store(
    app: Clients, selectivities: Sequence[float], rebuild: bool
) -> tuple[str, int, dict[float, int]]:
    """Create (or reuse) the tagged copy; returns (its URL, chunks, matching chunks per selectivity).

    Raises:
        ValueError: nothing stored, or a bad selectivity.
        asyncpg.PostgresError: the server refused CREATE/DROP DATABASE.
    """
    rows = await app.store.pool.fetch(
        "SELECT d.doc_id, count(*) AS n FROM documents d JOIN chunks c ON c.document_id = d.id GROUP BY d.doc_id"
    )
    per_document = {str(r["doc_id"]): int(r["n"]) for r in rows}
    chosen = chosen_documents(per_document, selectivities)
    expected = {s: sum(per_document[d] for d in ids) for s, ids in chosen.items()}
    chunks = sum(per_document.values())
    name = scaled_database_name(app.store.dsn, 1).removesuffix("_x1") + "_filtered"
    url = await ensure_database(app.store.dsn, name)
    async with VectorStore(url, app.store.model_name, app.store.dim) as copy:
        held = (await copy.count())[1]
        tags = await _tag_counts(copy, selectivities)
    if held == chunks and tags == expected and not rebuild:
        log.info("reusing %s: %d chunks, matching %s", name, held, tags)
        return url, chunks, expected
    if held:
        conn = await asyncpg.connect(app.store.dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
        url = await ensure_database(app.store.dsn, name)
    start = time.perf_counter()
    async with VectorStore(url, app.store.model_name, app.store.dim) as copy:
        async for page in stored_pages(app.store):
            await copy.add_documents([tagged(d, chosen) for d in page])
        log.info("filtered copy %s: %d chunks (%.0f s)", name, (await copy.count())[1], time.perf_counter() - start)
        async with copy.write_pool.acquire() as writer:
            await writer.execute("ANALYZE")
        tags = await _tag_counts(copy, selectivities)
    if tags != expected:
        raise ValueError(f"filtered copy {name}: tagged chunks {tags}; expected {expected}")
    return url, chunks, expected


async def _p50_ms(call: Callable[[int], Awaitable[object]], n: int) -> float:
    """p50 latency (ms) of `call(i)` for i in 0..n-1, one at a time, after 3 warm-up calls."""
    for i in range(min(3, n)):
        await call(i)
    latencies = []
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        latencies.append((time.perf_counter() - t0) * 1000)
    return round(float(percentiles(latencies, (50,))["p50"]), 2)


def recall(found: Sequence[ChunkHit], exact: Sequence[ChunkHit]) -> float | None:
    """|found ∩ exact| / |exact| by chunk id; None when `exact` is empty."""
    if not exact:
        return None
    return len({h.chunk_id for h in found} & {h.chunk_id for h in exact}) / len(exact)


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(float(np.mean(kept)), 4) if kept else None


async def filtered_legs(
    store: VectorStore,
    claims: Sequence[str],
    vectors: npt.NDArray[np.float32],
    scope: SearchScope,
    candidates: int,
    unfiltered: Mapping[str, float],
) -> dict[str, Any]:
    """Recall@10 against the exact filtered search and p50 latency, filtered and / unfiltered, per leg."""
    n = len(claims)
    dense_recall = [
        recall(
            await store.dense_search(vectors[i], RECALL_AT, scope=scope),
            await store.dense_search(vectors[i], RECALL_AT, exact=True, scope=scope),
        )
        for i in range(n)
    ]
    text_recall = [
        recall(
            await store.full_text_search(claims[i], RECALL_AT, match="any", rank="bm25", scope=scope),
            await store.full_text_search(claims[i], RECALL_AT, match="any", rank="bm25_exhaustive", scope=scope),
        )
        for i in range(n)
    ]
    dense_p50 = await _p50_ms(lambda i: store.dense_search(vectors[i], candidates, scope=scope), n)
    text_p50 = await _p50_ms(
        lambda i: store.full_text_search(claims[i], candidates, match="any", rank="bm25", scope=scope), n
    )
    return {
        "dense": {
            f"recall_at_{RECALL_AT}": _mean(dense_recall),
            "claims_with_matches": sum(r is not None for r in dense_recall),
            "p50_ms": dense_p50,
            "unfiltered_p50_ms": unfiltered["dense"],
            "ratio": round(dense_p50 / unfiltered["dense"], 3) if unfiltered["dense"] else None,
        },
        "full_text": {
            f"recall_at_{RECALL_AT}": _mean(text_recall),
            "claims_with_matches": sum(r is not None for r in text_recall),
            "p50_ms": text_p50,
            "unfiltered_p50_ms": unfiltered["full_text"],
            "ratio": round(text_p50 / unfiltered["full_text"], 3) if unfiltered["full_text"] else None,
        },
    }


async def run_filtered(
    app: Clients, claims: Sequence[str], selectivities: Sequence[float], requests: int, rebuild: bool
) -> dict[str, Any]:
    """The filtered report: the copy's URL and chunks, and per selectivity the matching chunks and both legs."""
    url, chunks, matching = await build_filtered_store(app, selectivities, rebuild)
    claims = list(claims[: max(1, min(requests, len(claims)))])
    vectors = await app.embedder.embed(claims, kind="query")
    candidates = max(app.settings.retrieval_candidates, app.settings.top_k)
    points = []
    async with build_store(url, app.store.model_name, app.store.dim, app.settings) as store:
        unfiltered = {
            "dense": await _p50_ms(lambda i: store.dense_search(vectors[i], candidates), len(claims)),
            "full_text": await _p50_ms(
                lambda i: store.full_text_search(claims[i], candidates, match="any", rank="bm25"), len(claims)
            ),
        }
        for s in selectivities:
            scope = SearchScope.from_filter({tag_key(s): True})
            legs = await filtered_legs(store, claims, vectors, scope, candidates, unfiltered)
            points.append({"selectivity": s, "matching_chunks": matching[s], "filter": scope.to_filter(), **legs})
            log.info("filtered %s: %s", s, points[-1])
    return {"database": url, "chunks": chunks, "claims": len(claims), "top_k": candidates, "points": points}


def render_filtered(report: dict[str, Any], console: Any) -> None:
    """The filtered points as a Rich table."""
    from rich.table import Table

    filtered = report["filtered"]
    m = report["machine"]
    table = Table(
        title=f"rag bench query, filtered: {filtered['chunks']} chunks, {filtered['claims']} claims, top "
        f"{filtered['top_k']} (recall@{RECALL_AT} vs the exact filtered search), {m['cores']} cores, load avg "
        f"{m['load_average_1m_at_start']} -> {m['load_average_1m_at_end']}, {m['date_utc']}"
    )
    for col in ("selectivity", "matching", "leg", f"recall@{RECALL_AT}", "p50 ms", "unfiltered p50", "ratio"):
        table.add_column(col, justify="left" if col == "leg" else "right")
    for p in filtered["points"]:
        for leg in ("dense", "full_text"):
            row = p[leg]
            table.add_row(
                f"{p['selectivity']:g}",
                str(p["matching_chunks"]),
                leg,
                "-" if row[f"recall_at_{RECALL_AT}"] is None else f"{row[f'recall_at_{RECALL_AT}']:.3f}",
                f"{row['p50_ms']:.2f}",
                f"{row['unfiltered_p50_ms']:.2f}",
                "-" if row["ratio"] is None else f"{row['ratio']:.2f}",
            )
    console.print(table)


def write_filtered_plot(report: dict[str, Any], path: Path) -> Path:
    """Filtered and unfiltered search p50 (ms) per selectivity, one panel per leg."""
    from evals.plots import pyplot, save_figure

    filtered = report["filtered"]
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4))
    labels = [f"{p['selectivity']:g}" for p in filtered["points"]]
    xs = np.arange(len(labels))
    for ax, leg in zip(axes, ("dense", "full_text"), strict=True):
        rows = [p[leg] for p in filtered["points"]]
        ax.bar(xs - 0.2, [r["unfiltered_p50_ms"] for r in rows], 0.4, label="unfiltered")
        ax.bar(xs + 0.2, [r["p50_ms"] for r in rows], 0.4, label="filtered")
        ax.set_xticks(xs, labels)
        ax.set_xlabel("share of chunks matching the filter")
        ax.set_ylabel(f"{leg} search p50 (ms)")
        ax.legend(fontsize=8)
    m = report["machine"]
    title = (
        f"rag bench query, filtered: {filtered['chunks']} chunks, top {filtered['top_k']}, {m['cores']} cores, "
        f"{m['date_utc'][:10]}"
    )
    return save_figure(fig, path, title)
