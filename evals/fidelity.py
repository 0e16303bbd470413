"""Format fidelity: the same SciFact documents ingested from JSONL and from PDF, HTML and DOCX renderings retrieve
alike, and cited PDF pages are where the text is.

Protocol: the first `claims` judged claims of the SciFact test split, their gold abstracts plus the first
`distractors` abstracts of the corpus. Each document is rendered (`evals.render_docs`) as an HTML page with navigation
and a footer, a PDF printed by headless Chromium and a DOCX; each format is ingested by the product's own pipeline
(`tools.ingest`, folder walk, sniffing, extraction, chunking) into a fresh database of its own, and every claim is
searched with the configured retrieval mode (`RETRIEVAL_MODE`); a document ranks at its best chunk. nDCG@10 (BEIR
protocol, `evals.metrics`) of each rendering is compared with the JSONL ingest of the same documents; the target is
within 0.01.

Page check: `book_docs` of the documents printed into one PDF, each on a page of its own, ingested alone; a chunk's
stored page must be the page of the document its text comes from (found by its first 80 characters).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import asyncpg

from agent.config.settings import Settings
from agent.core.wiring import build_embedder, build_retriever, build_store, ingest_options
from evals.metrics import evaluate
from evals.render_docs import render
from evals.retrieval_eval import doc_ranking, with_database
from evals.scifact import CorpusDoc, load_corpus, load_qrels, load_queries
from tools.ingest import ingest, plan_inputs

FORMATS = ("jsonl", "pdf", "html", "docx")
TARGET_DELTA = 0.01
SEARCH_TOP_K = 50
"""Chunks retrieved per claim; documents are ranked at their best chunk and cut at 10 for nDCG@10."""

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class Subset:
    """The claims, their qrels and the documents of one fidelity run."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    docs: list[CorpusDoc]


def subset(claims: int, distractors: int) -> Subset:
    """The first `claims` judged test claims, their gold abstracts and the first `distractors` corpus abstracts."""
    queries = load_queries("test")[:claims]
    qrels_all = load_qrels("test")
    qrels = {q.query_id: qrels_all[q.query_id] for q in queries}
    corpus = load_corpus()
    wanted = {d for docs in qrels.values() for d in docs} | set(list(corpus)[:distractors])
    return Subset({q.query_id: q.text for q in queries}, qrels, [corpus[d] for d in corpus if d in wanted])


async def _fresh_database(server_url: str, name: str) -> str:
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(server_url, name)


def _scifact_id(doc_id: str) -> str:
    """The SciFact id of a stored document: a rendered file's stem (`pdf/4983.pdf` -> `4983`), a JSONL `_id` as is."""
    return PurePosixPath(doc_id).stem if "." in PurePosixPath(doc_id).name else doc_id


async def _ingest_and_search(
    folder: Path, url: str, settings: Settings, queries: dict[str, str]
) -> tuple[dict[str, list[str]], dict[str, Any]]:
    embedder = build_embedder(settings, workload="bulk")
    async with embedder, build_store(url, embedder.spec.name, embedder.spec.dim, settings) as store:
        report = await ingest(plan_inputs([folder], root=folder), embedder, store, ingest_options(settings))
        retriever = build_retriever(embedder, store, settings)
        run = {}
        for query_id, text in queries.items():
            passages = (await retriever.search(text, SEARCH_TOP_K)).passages
            run[query_id] = [_scifact_id(d) for d in doc_ranking(passages)]
        _, chunks = await store.count()
    stats = {
        "documents": report.added + report.skipped,
        "chunks": chunks,
        "failed_files": len([e for e in report.file_errors if e.kind != "unsupported"]),
        "ingest_s": round(report.wall_s, 2),
        "chunks_per_s": round(report.chunks_per_s, 1),
        "pdf_pages_per_s": round(report.pages_per_s, 1),
    }
    return run, stats


async def _page_check(folder: Path, url: str, settings: Settings, book: list[CorpusDoc]) -> dict[str, Any]:
    embedder = build_embedder(settings, workload="bulk")
    async with embedder, build_store(url, embedder.spec.name, embedder.spec.dim, settings) as store:
        await ingest(plan_inputs([folder], root=folder), embedder, store, ingest_options(settings))
        rows = await store.pool.fetch("SELECT text, metadata FROM chunks ORDER BY chunk_index")
    import json

    def squash(text: str) -> str:
        return "".join(text.split())

    pages = [squash(f"{d.title} {d.text}") for d in book]
    correct = located = 0
    for row in rows:
        head = squash(row["text"])[:80]
        expected = next((i + 1 for i, page in enumerate(pages) if head in page), None)
        if expected is None:
            continue
        located += 1
        correct += json.loads(row["metadata"]).get("page") == expected
    return {"pages": len(book), "chunks": len(rows), "located": located, "page_correct": correct}


async def run_fidelity(
    settings: Settings, work_dir: Path, claims: int, distractors: int, book_docs: int, progress: ProgressFn
) -> dict[str, Any]:
    """Render, ingest and search every format; returns the results object (see `evals/results/fidelity.json`).

    Raises:
        FileNotFoundError: no Chromium to print PDFs. EmbedderError / StoreError / asyncpg errors: from the stack.
    """
    chosen = subset(claims, distractors)
    book = chosen.docs[:book_docs]
    progress(f"rendering {len(chosen.docs)} documents as HTML, PDF and DOCX, and a {len(book)}-page PDF")
    start = time.perf_counter()
    folders = await render(chosen.docs, work_dir, book)
    render_s = time.perf_counter() - start
    server = settings.resolved_database_url()
    model = settings.embedder_model.replace("-", "_")
    formats: dict[str, dict[str, Any]] = {}
    for name in FORMATS:
        progress(f"ingesting and searching the {name} rendering")
        url = await _fresh_database(server, f"rag_eval_fidelity_{name}_{model}")
        run, stats = await _ingest_and_search(folders[name], url, settings, chosen.queries)
        formats[name] = {"ndcg@10": round(evaluate(chosen.qrels, run)["ndcg@10"], 4), **stats}
    base = formats["jsonl"]["ndcg@10"]
    for name in FORMATS[1:]:
        delta = round(formats[name]["ndcg@10"] - base, 4)
        formats[name] |= {"delta_vs_jsonl": delta, "within_target": abs(delta) <= TARGET_DELTA}
    progress("checking cited pages of the one-document-per-page PDF")
    pages = await _page_check(
        folders["book"], await _fresh_database(server, f"rag_eval_fidelity_book_{model}"), settings, book
    )
    return {
        "date": dt.date.today().isoformat(),
        "split": "test",
        "claims": len(chosen.queries),
        "documents": len(chosen.docs),
        "embedder_model": settings.embedder_model,
        "retrieval_mode": settings.retrieval_mode,
        "chunk_tokens": settings.chunk_tokens,
        "chunk_overlap_tokens": settings.chunk_overlap_tokens,
        "render_s": round(render_s, 1),
        "target_delta": TARGET_DELTA,
        "formats": formats,
        "page_check": pages,
    }
