"""`rag bench page`: how long the web page takes to settle with the whole SciFact corpus (5,183 documents) in the
Postgres store, in headless Debian Chromium (Playwright driving `/usr/bin/chromium`).

The store: database `<database>_page` on the configured Postgres server (the user's store is untouched), holding
every SciFact abstract as one document of one chunk with a seeded random unit vector (the page lists and searches
documents; it never embeds, so Triton is not needed). A database that already holds exactly the corpus is reused.

The app: `agent.http.create_app` over a `RagApp` whose library is that store (`StoreLibrary`), served by uvicorn in
this process on a free loopback port; conversations in memory, a test model (no question is asked).

Per run, a fresh browser context (no stored conversation or key) opens `/`:
- `settle_ms`: the page's own `window.pageSettledMs` (ms since navigation start, `performance.now()`), set when its
  first reads have answered and been drawn: the collections, the conversations, the first 50 documents with their
  total, and the stored conversation (none);
- `last_page_ms`: a click on "last page" until the last page is drawn (its 50-row request and the table);
- `search_ms`: `GET /v1/documents?q=<a doc id>` from the page (`ILIKE` over every document, see
  `tools.store.listing`) until its JSON is parsed.
Figures are p50 and max over the runs, after one warm-up run (not counted). Target: settle p50 under 1,000 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import uvicorn
from pydantic_ai.models.test import TestModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.library import StoreLibrary
from agent.core.wiring import Services, build_ingestion, build_store
from agent.http import create_app
from evals.machine import machine_info
from evals.plots import emit_report
from evals.render_docs import CHROMIUM, CHROMIUM_ARGS
from evals.retrieval_eval import ensure_database
from evals.scifact import SCIFACT_DIR, load_corpus
from tools.in_memory import InMemoryCollection
from tools.model_specs import get_spec
from tools.records import ChunkRecord, DocumentRecord
from tools.stats import percentiles
from tools.store import VectorStore

TARGET_SETTLE_MS = 1000.0
"""The page should settle within this (p50)."""
BATCH_DOCS = 500
"""Documents per store transaction while filling the database."""


def page_database_name(url: str) -> str:
    """`<database of url>_page` (at most 63 characters, Postgres' identifier limit)."""
    base = urlsplit(url).path.lstrip("/") or "postgres"
    return base[: 63 - len("_page")] + "_page"


def corpus_records(dim: int, seed: int = 0) -> list[DocumentRecord]:
    """Every SciFact abstract as a document of one chunk (its text, cut to 2,000 characters) with a seeded random
    unit vector of `dim` dimensions."""
    rng = np.random.default_rng(seed)
    records = []
    for d in load_corpus(SCIFACT_DIR).values():
        vector = rng.standard_normal(dim).astype(np.float32)
        text = d.text[:2000]
        digest = hashlib.sha256(f"{d.title}\n{text}".encode()).hexdigest()
        chunk = ChunkRecord(0, text, len(text.split()), vector / np.linalg.norm(vector))
        records.append(DocumentRecord(d.doc_id, d.title, "scifact", digest, [chunk]))
    return records


async def fill(store: VectorStore, records: list[DocumentRecord]) -> bool:
    """Make the store hold exactly `records` (all in `default`); False when it already did (nothing written)."""
    documents, _ = await store.count()
    if documents == len(records):
        return False
    stored = [d.doc_id async for d in store.iter_documents()]
    if stored:
        await store.delete_documents(stored)
    for i in range(0, len(records), BATCH_DOCS):
        await store.add_documents(records[i : i + BATCH_DOCS])
    return True


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def served(settings: Settings, store: VectorStore) -> AsyncIterator[str]:
    """The app over `store`, served by uvicorn in this event loop; its base URL."""
    library = StoreLibrary(store, build_ingestion(settings, store))  # nothing is added: its embedder is never used
    rag = RagApp(settings, Services(InMemoryCollection([]), library, TestModel()))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, rag), host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError(f"uvicorn on port {port} stopped before it started")
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


LAST_PAGE_JS = """async () => {
  const info = document.getElementById("page-info");
  const drawn = new Promise((resolve) => {
    const watch = new MutationObserver(() => {
      if (info.dataset.page === info.dataset.pages) { watch.disconnect(); resolve(); }
    });
    watch.observe(info, { attributes: true, childList: true, characterData: true, subtree: true });
  });
  const start = performance.now();
  document.getElementById("last-page").click();
  await drawn;
  return performance.now() - start;
}"""

SEARCH_JS = """async (q) => {
  const start = performance.now();
  const body = await (await fetch(`/v1/documents?limit=50&q=${encodeURIComponent(q)}`)).json();
  if (!body.total) throw new Error(`no document matches ${q}`);
  return performance.now() - start;
}"""


async def measure(url: str, runs: int, queries: list[str]) -> dict[str, list[float]]:
    """`runs` page opens (after one warm-up) with their settle, last-page and search times in ms."""
    from playwright.async_api import async_playwright

    figures: dict[str, list[float]] = {"settle_ms": [], "last_page_ms": [], "search_ms": []}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            for run in range(runs + 1):
                context = await browser.new_context()
                page = await context.new_page()
                await page.goto(url + "/")
                await page.wait_for_function("window.pageSettledMs !== undefined", timeout=60_000)
                settle = float(await page.evaluate("window.pageSettledMs"))
                rows = await page.locator("tr.doc").count()
                if rows != 50:
                    raise RuntimeError(f"the page settled with {rows} document rows; expected 50")
                last_page = float(await page.evaluate(LAST_PAGE_JS))
                search = float(await page.evaluate(SEARCH_JS, queries[run % len(queries)]))
                await context.close()
                if run:  # the first run warms the server, the pools and the browser
                    figures["settle_ms"].append(settle)
                    figures["last_page_ms"].append(last_page)
                    figures["search_ms"].append(search)
        finally:
            await browser.close()
    return figures


def summary(values: list[float]) -> dict[str, float | int]:
    """p50 and max (ms, 1 decimal) and the count."""
    p = percentiles(values, (50,))
    return {"p50": round(float(p["p50"]), 1), "max": round(max(values), 1), "n": len(values)}


async def run_page_settle(settings: Settings, runs: int = 10) -> dict[str, Any]:
    """Fill (or reuse) the page database, serve the app over it and measure `runs` page opens (module docstring).

    Raises:
        SettingsError: no database configured (`rag up`, or `DATABASE_URL`).
    """
    spec = get_spec(settings.embedder_model)
    url = settings.resolved_database_url()
    page_url = await ensure_database(url, page_database_name(url))
    records = corpus_records(spec.dim)
    queries = [r.doc_id for r in random.Random(0).sample(records, 5)]
    async with build_store(page_url, spec.name, spec.dim, settings) as store:
        filled = await fill(store, records)
        documents, _ = await store.count()
        async with served(settings, store) as base:
            figures = await measure(base, runs, queries)
    settle = summary(figures["settle_ms"])
    return {
        "documents": documents,
        "filled": filled,
        "runs": runs,
        "settle_ms": settle,
        "last_page_ms": summary(figures["last_page_ms"]),
        "search_ms": summary(figures["search_ms"]),
        "target_settle_ms": TARGET_SETTLE_MS,
        "meets_target": settle["p50"] < TARGET_SETTLE_MS,
        "machine": machine_info(),
    }


def render(report: dict[str, Any]) -> str:
    """The report as a few lines of text."""
    lines = [f"web page with {report['documents']} documents in Postgres, {report['runs']} runs (after a warm-up):"]
    for key, label in (("settle_ms", "settle"), ("last_page_ms", "last page"), ("search_ms", "search by id")):
        figure = report[key]
        lines.append(f"  {label:<13} p50 {figure['p50']:>7.1f} ms   max {figure['max']:>7.1f} ms")
    verdict = "meets" if report["meets_target"] else "misses"
    lines.append(f"  settle p50 {verdict} the target of {report['target_settle_ms']:.0f} ms")
    return "\n".join(lines)


def run_page_settle_command(runs: int, output: Path | None, as_json: bool) -> None:
    """`rag bench page`: run, print (text or JSON) and write the JSON report (default
    `DATA_DIR/bench/page-settle.json`).

    Raises:
        FileNotFoundError: `/usr/bin/chromium` is missing.
    """
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"{CHROMIUM} missing: apt-get install -y chromium (Debian package)")
    settings = Settings()
    report = asyncio.run(run_page_settle(settings, runs))
    path = output or settings.data_dir / "bench" / "page-settle.json"
    emit_report(report, as_json, path, lambda r, console: console.print(render(r), highlight=False))
