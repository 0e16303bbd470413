"""Format fidelity: the same SciFact documents ingested from JSONL and from PDF, HTML, DOCX and scanned renderings
retrieve alike, and cited PDF pages are where the text is.

Protocol: the first `claims` judged claims of the SciFact test split, their gold abstracts plus the first
`distractors` abstracts of the corpus. Each document is rendered (`evals.render_docs`) as an HTML page with navigation
and a footer, a PDF printed by headless Chromium, a DOCX, and a scan (the printed PDF rasterised by PDFium at `OCR_DPI`
and rebuilt as an image-only PDF, read back by OCR); each format is ingested by the product's own pipeline
(`tools.ingest`, folder walk, sniffing, extraction, chunking) into a fresh database of its own, and every claim is
searched with the configured retrieval mode (`RETRIEVAL_MODE`); a document ranks at its best chunk. nDCG@10 (BEIR
protocol, `evals.metrics`) of each rendering is compared with the JSONL ingest of the same documents; the target is
within 0.01 (within 0.02 for the scan: OCR misreads a few characters). The scan's row also gives OCR pages/s.

Page check: `book_docs` of the documents printed into one PDF, each on a page of its own, ingested alone; a chunk's
stored page must be the page of the document its text comes from (found by its first 80 characters, or where OCR
misread one of them, by the page holding 90% of its words: `printed_page`). The same book scanned (image-only) is
checked the same way with its pages read by OCR (`page_check_scanned`).
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
from evals.extract_bench import words
from evals.metrics import evaluate
from evals.render_docs import render, scan_pdf
from evals.retrieval_eval import doc_ranking, with_database
from evals.scifact import CorpusDoc, load_corpus, load_qrels, load_queries
from tools.ingest import ingest, plan_inputs

FORMATS = ("jsonl", "pdf", "html", "docx", "scanned")
TARGET_DELTA = 0.01
SCANNED_TARGET_DELTA = 0.02
"""OCR misreads a few characters of a clean 300 dpi scan: its target is wider than a text layer's."""
LOCATE_SHARE = 0.9
"""A chunk whose first characters an OCR misread changed is located by the page holding this share of its words."""
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
        "ocr_pages": report.ocr_pages,
        "ocr_pages_per_s": round(report.ocr_pages_per_s, 2),
    }
    return run, stats


async def _page_check(folder: Path, url: str, settings: Settings, book: list[CorpusDoc]) -> dict[str, Any]:
    embedder = build_embedder(settings, workload="bulk")
    async with embedder, build_store(url, embedder.spec.name, embedder.spec.dim, settings) as store:
        await ingest(plan_inputs([folder], root=folder), embedder, store, ingest_options(settings))
        rows = await store.pool.fetch("SELECT text, metadata FROM chunks ORDER BY chunk_index")
    import json

    sources = [f"{d.title} {d.text}" for d in book]
    correct = located = 0
    for row in rows:
        expected = printed_page(row["text"], sources)
        if expected is None:
            continue
        located += 1
        correct += json.loads(row["metadata"]).get("page") == expected
    return {"pages": len(book), "chunks": len(rows), "located": located, "page_correct": correct}


def _squash(text: str) -> str:
    return "".join(text.split())


def printed_page(chunk: str, sources: list[str]) -> int | None:
    """The 1-based page whose source text `chunk` comes from: the page holding its first 80 characters (whitespace
    ignored); failing that (an OCR misread among them), the page holding at least `LOCATE_SHARE` of its words when
    no other page holds half of them; else None (not located)."""
    head = _squash(chunk)[:80]
    exact = [i + 1 for i, source in enumerate(sources) if head in _squash(source)]
    if exact:
        return exact[0]
    chunk_words = words(chunk)
    if not chunk_words:
        return None
    shares = sorted(
        ((sum(w in vocabulary for w in chunk_words) / len(chunk_words), i + 1)
         for i, vocabulary in enumerate(set(words(source)) for source in sources)),
        reverse=True,
    )  # fmt: skip
    best, runner_up = shares[0], (shares[1][0] if len(shares) > 1 else 0.0)
    return best[1] if best[0] >= LOCATE_SHARE and runner_up < 0.5 else None


def _scan_folder(source: Path, out: Path, dpi: int) -> Path:
    """Every PDF of `source` as a scan (`evals.render_docs.scan_pdf` at `dpi`) in `out`, same names."""
    out.mkdir(parents=True, exist_ok=True)
    for pdf in sorted(source.glob("*.pdf")):
        scan_pdf(pdf, out / pdf.name, dpi)
    return out


def with_deltas(formats: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`formats` with each rendering's `delta_vs_jsonl`, its `target_delta` and `within_target` (against the JSONL
    row)."""
    base = formats["jsonl"]["ndcg@10"]
    out = {}
    for name, row in formats.items():
        if name != "jsonl":
            target = SCANNED_TARGET_DELTA if name == "scanned" else TARGET_DELTA
            delta = round(row["ndcg@10"] - base, 4)
            row = row | {"delta_vs_jsonl": delta, "target_delta": target, "within_target": abs(delta) <= target}
        out[name] = row
    return out


def merge_results(earlier: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new` (a run of some formats) over `earlier` (a results file of the same protocol): the formats and page
    checks run replace theirs, the others are kept with their own `date`, and every delta is taken against the new
    JSONL row.

    Raises:
        ValueError: the two runs differ in claims, documents, embedder, retrieval mode or chunk window (their rows
            cannot be compared).
    """
    protocol = ("claims", "documents", "embedder_model", "retrieval_mode", "chunk_tokens", "chunk_overlap_tokens")
    differs = [k for k in protocol if earlier.get(k) != new.get(k)]
    if differs:
        raise ValueError(f"the earlier results differ in {', '.join(differs)}; run every format again")
    kept = {name: row for name, row in earlier["formats"].items() if name not in new["formats"]}
    for row in kept.values():
        row.setdefault("date", earlier["date"])
    formats = {name: (new["formats"] | kept)[name] for name in FORMATS if name in new["formats"] | kept}
    return earlier | new | {"formats": with_deltas(formats)}


async def run_fidelity(
    settings: Settings,
    work_dir: Path,
    claims: int,
    distractors: int,
    book_docs: int,
    progress: ProgressFn,
    formats_run: tuple[str, ...] = FORMATS,
) -> dict[str, Any]:
    """Render, ingest and search every format of `formats_run` (JSONL, the baseline, always); returns the results
    object (see `evals/results/fidelity.json`): `page_check` when `pdf` is run, `page_check_scanned` when `scanned`
    is. Scans are rasterised at `OCR_DPI` and read with the `OCR*` settings.

    Raises:
        ValueError: an unknown format in `formats_run`.
        FileNotFoundError: no Chromium to print PDFs. EmbedderError / StoreError / asyncpg errors: from the stack.
    """
    unknown = set(formats_run) - set(FORMATS)
    if unknown:
        raise ValueError(f"unknown formats {sorted(unknown)}; expected some of {', '.join(FORMATS)}")
    names = [name for name in FORMATS if name == "jsonl" or name in formats_run]
    chosen = subset(claims, distractors)
    book = chosen.docs[:book_docs]
    progress(f"rendering {len(chosen.docs)} documents as HTML, PDF and DOCX, and a {len(book)}-page PDF")
    start = time.perf_counter()
    folders = await render(chosen.docs, work_dir, book)
    if "scanned" in names:
        progress(f"scanning the printed PDFs at {settings.ocr_dpi} dpi (image-only PDFs)")
        folders["scanned"] = _scan_folder(folders["pdf"], work_dir / "scanned", settings.ocr_dpi)
        folders["scanned_book"] = _scan_folder(folders["book"], work_dir / "scanned_book", settings.ocr_dpi)
    render_s = time.perf_counter() - start
    server = settings.resolved_database_url()
    model = settings.embedder_model.replace("-", "_")
    formats: dict[str, dict[str, Any]] = {}
    for name in names:
        progress(f"ingesting and searching the {name} rendering")
        url = await _fresh_database(server, f"rag_eval_fidelity_{name}_{model}")
        run, stats = await _ingest_and_search(folders[name], url, settings, chosen.queries)
        ndcg = round(evaluate(chosen.qrels, run)["ndcg@10"], 4)
        formats[name] = {"date": dt.date.today().isoformat(), "ndcg@10": ndcg, **stats}
    checks: dict[str, Any] = {}
    books = (("pdf", "page_check", "book"), ("scanned", "page_check_scanned", "scanned_book"))
    for name, key, book_folder in books:
        if name in names:
            progress(f"checking cited pages of the one-document-per-page {name} book")
            url = await _fresh_database(server, f"rag_eval_fidelity_{book_folder}_{model}")
            checks[key] = await _page_check(folders[book_folder], url, settings, book)
    return {
        "date": dt.date.today().isoformat(),
        "split": "test",
        "claims": len(chosen.queries),
        "documents": len(chosen.docs),
        "embedder_model": settings.embedder_model,
        "retrieval_mode": settings.retrieval_mode,
        "chunk_tokens": settings.chunk_tokens,
        "chunk_overlap_tokens": settings.chunk_overlap_tokens,
        "ocr_dpi": settings.ocr_dpi,
        "ocr_language": settings.ocr_language,
        "render_s": round(render_s, 1),
        "target_delta": TARGET_DELTA,
        "formats": with_deltas(formats),
        **checks,
    }
