"""`rag bench sync`: an incremental folder sync (`rag sync`) against a fresh ingest of the same folder.

Set-up: a scratch database (`rag_bench_sync`, dropped and made afresh) on the settings' Postgres, the settings'
Triton, and a folder of `files` files written from SciFact abstracts (`write_folder`: Markdown files of
`SECTIONS` abstracts each, one per heading section, and every tenth file a plain-text file of one abstract).

Steps, each timed (wall clock) with the embedder's calls and texts counted (`tools.ingest.sync.CountingEmbedder`):
1. the initial sync into collection `synced`;
2. `change_folder`: 3 files edited (a sentence appended to one section), 2 deleted, 1 renamed; then the re-sync: the
   chunks it embedded against the chunks a full re-ingest of the changed files would embed (`changed_chunks`);
3. a fresh ingest of the changed folder into collection `fresh`, and the check that both collections hold the same
   documents (`snapshot`, `differences`: doc ids, titles, sources, metadata, content hashes, chunk texts, token
   counts and locations, vectors within `VECTOR_TOLERANCE`);
4. a sync with nothing changed: embed calls and documents written (target: 0 and 0).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np

from agent.config.settings import Settings
from agent.core.wiring import build_embedder, build_store, ingest_options
from evals.bench_mixed import fresh_database
from evals.machine import machine_info
from evals.plots import emit_report
from evals.scifact import SCIFACT_DIR, load_corpus
from tools.chunking import fit_window
from tools.ingest import InputFile, ingest, plan_inputs
from tools.ingest.embedding import located_chunks
from tools.ingest.readers import read_file_document
from tools.ingest.sync import CountingEmbedder, SyncRequest, sync_folder
from tools.store import VectorStore
from tools.store.records import Conn
from tools.store.sync_state import PostgresSyncLedger

log = logging.getLogger(__name__)

SCRATCH_DB = "rag_bench_sync"
"""The scratch database of the benchmark (dropped and made afresh each run)."""
SECTIONS = 2
"""Abstracts per Markdown file, one per `##` section (chunks never cross a section)."""
VECTOR_TOLERANCE = 1e-4
"""Largest difference allowed between a synced chunk's vector and the fresh ingest's (max abs, per component)."""
EDITED, DELETED, RENAMED = 3, 2, 1
"""The changes made between the two syncs."""


def write_folder(folder: Path, files: int, offset: int = 0) -> list[str]:
    """`files` files under `folder` (`a/`, `b/` and the top level) from SciFact abstracts, starting at abstract
    `offset`: Markdown files `doc-NNN.md` of `SECTIONS` abstracts (a `#` title, one `##` section each), every tenth
    a text file `note-NNN.txt` of one abstract. Returns their paths relative to `folder`, in order."""
    abstracts = list(load_corpus(SCIFACT_DIR).values())[offset:]
    names: list[str] = []
    taken = 0
    for i in range(files):
        sub = ("", "a/", "b/")[i % 3]
        if i % 10 == 9:
            doc = abstracts[taken]
            taken += 1
            name = f"{sub}note-{i:03d}.txt"
            text = f"{doc.title}\n\n{doc.text}\n"
        else:
            group = abstracts[taken : taken + SECTIONS]
            taken += SECTIONS
            name = f"{sub}doc-{i:03d}.md"
            text = f"# Notes {i}\n\n" + "".join(f"## {d.title}\n\n{d.text}\n\n" for d in group)
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        names.append(name)
    return names


@dataclass(frozen=True)
class FolderChange:
    """What `change_folder` did: the files edited, deleted, and renamed (old, new), relative paths."""

    edited: list[str]
    deleted: list[str]
    renamed: list[tuple[str, str]]


def change_folder(folder: Path, names: list[str]) -> FolderChange:
    """Edit `EDITED` Markdown files (a sentence appended to their second section), delete `DELETED` others and
    rename `RENAMED` Markdown file (into another subfolder), all chosen by position in `names`."""
    markdown = [n for n in names if n.endswith(".md")]
    edited, deleted, renamed = markdown[:EDITED], markdown[EDITED : EDITED + DELETED], []
    for name in edited:
        path = folder / name
        parts = path.read_text(encoding="utf-8").split("\n\n## ")
        parts[2] = parts[2].rstrip("\n") + " This sentence was added by an edit.\n"
        path.write_text("\n\n## ".join(parts), encoding="utf-8")
    for name in deleted:
        (folder / name).unlink()
    for name in markdown[EDITED + DELETED : EDITED + DELETED + RENAMED]:
        new = f"moved/{Path(name).name}"
        (folder / new).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).rename(folder / new)
        renamed.append((name, new))
    return FolderChange(edited, deleted, renamed)


def chunk_texts(path: Path, doc_id: str, settings: Settings, embedder: CountingEmbedder) -> list[str]:
    """The chunk texts `rag ingest` makes of the file `path` (its type sniffed) with the settings' window."""
    from tools.extract import sniff

    document = read_file_document(InputFile(path, doc_id, kind=sniff(path))).document
    if document is None:
        return []
    window, overlap = fit_window(settings.chunk_tokens, settings.chunk_overlap_tokens, embedder.spec.max_tokens)
    return [c.text for c, _ in located_chunks(document, embedder.tokenizer, window, overlap)]


Snapshot = dict[str, dict[str, Any]]
"""doc id -> its stored row and chunks (`snapshot`)."""


async def snapshot(conn: Conn, collection: str) -> Snapshot:
    """What `collection` holds: per doc id its title, source, metadata, content hash and chunks (index, text, token
    count, metadata, vector as float32)."""
    docs = await conn.fetch(
        "SELECT id, doc_id, title, source, metadata, content_hash FROM documents WHERE collection = $1", collection
    )
    out: Snapshot = {}
    for d in docs:
        chunks = await conn.fetch(
            "SELECT chunk_id, chunk_index, text, token_count, metadata, embedding FROM chunks WHERE document_id = $1 "
            "ORDER BY chunk_index",
            d["id"],
        )
        out[d["doc_id"]] = {
            "title": d["title"],
            "source": d["source"],
            "metadata": json.loads(d["metadata"]),
            "content_hash": d["content_hash"],
            "chunks": [
                (
                    c["chunk_index"],
                    c["text"],
                    c["token_count"],
                    json.loads(c["metadata"]),
                    _vector(c["embedding"]),
                )
                for c in chunks
            ],
            "chunk_ids": [c["chunk_id"] for c in chunks],
        }
    return out


def _vector(value: Any) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A stored embedding (pgvector's `Vector` or an array) as float32."""
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


def differences(a: Snapshot, b: Snapshot, tolerance: float = VECTOR_TOLERANCE) -> list[str]:
    """How two snapshots differ (empty: the same documents, chunks and vectors within `tolerance`); chunk ids are
    not compared (they name the collection)."""
    out = []
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        out.append(f"doc ids: only in the first {only_a}, only in the second {only_b}")
    for doc_id in sorted(set(a) & set(b)):
        x, y = a[doc_id], b[doc_id]
        for key in ("title", "source", "metadata", "content_hash"):
            if x[key] != y[key]:
                out.append(f"{doc_id}: {key} {x[key]!r} != {y[key]!r}")
        if [c[:4] for c in x["chunks"]] != [c[:4] for c in y["chunks"]]:
            out.append(f"{doc_id}: chunks differ (texts, token counts or locations)")
            continue
        gap = max((float(np.abs(c[4] - d[4]).max()) for c, d in zip(x["chunks"], y["chunks"], strict=True)), default=0)
        if gap > tolerance:
            out.append(f"{doc_id}: vectors differ by up to {gap:.2e}")
    return out


async def collection_version(conn: Conn, collection: str) -> int:
    """The collection's version counter (`collection_versions`; moves with every written document row)."""
    return int(await conn.fetchval("SELECT version FROM collection_versions WHERE collection = $1", collection) or 0)


async def run_sync_bench(settings: Settings, files: int) -> dict[str, Any]:
    """The benchmark's steps (see the module docstring); the report."""
    url = await fresh_database(settings, SCRATCH_DB)
    embedder = build_embedder(settings, workload="bulk")
    spec = embedder.spec
    options = ingest_options(settings)
    steps: dict[str, Any] = {}
    with TemporaryDirectory(prefix="rag-bench-sync-") as work:
        folder = (Path(work) / "folder").resolve()
        names = write_folder(folder, files)
        request = SyncRequest(folder, collection="synced")
        async with build_store(url, spec.name, spec.dim, settings) as store, embedder:
            counted = CountingEmbedder(embedder)

            async def step(name: str) -> dict[str, Any]:
                calls, texts, start = counted.calls, counted.texts, time.perf_counter()
                report = await sync_folder(request, counted, store, PostgresSyncLedger(store), options)
                figures = {
                    "wall_s": round(time.perf_counter() - start, 3),
                    "embed_calls": counted.calls - calls,
                    "chunks_embedded": counted.texts - texts,
                    "chunks_reused": report.chunks_reused,
                    "added": len(report.added),
                    "updated": len(report.updated),
                    "moved": len(report.moved),
                    "removed": len(report.removed),
                    "unchanged": report.unchanged,
                    "failed": len(report.failed),
                }
                log.info("%s: %s", name, figures)
                return figures

            steps["initial"] = await step("initial sync")
            before = {n: chunk_texts(folder / n, n, settings, counted) for n in names}
            change = change_folder(folder, names)
            after = {n: chunk_texts(folder / n, n, settings, counted) for n in change.edited}
            steps["changed"] = await step("re-sync after the changes")
            steps["changed"]["chunks_of_changed_files"] = sum(len(t) for t in after.values())
            steps["changed"]["chunks_changed"] = changed_chunks(before, after)
            steps["changed"]["chunks_in_folder"] = await _chunks(store, "synced")
            start = time.perf_counter()
            inputs = plan_inputs([folder], root=folder)
            await ingest(inputs, embedder, store, ingest_options(settings, "fresh"))
            fresh_s = time.perf_counter() - start
            async with store.pool.acquire() as conn:
                diff = differences(await snapshot(conn, "synced"), await snapshot(conn, "fresh"))
                version = await collection_version(conn, "synced")
            steps["fresh_ingest"] = {"wall_s": round(fresh_s, 3), "documents": len(inputs)}
            steps["no_change"] = await step("sync with nothing changed")
            async with store.pool.acquire() as conn:
                steps["no_change"]["documents_written"] = await collection_version(conn, "synced") - version
    return {
        "benchmark": "sync",
        "files": files,
        "sections_per_markdown_file": SECTIONS,
        "changes": {"edited": EDITED, "deleted": DELETED, "renamed": RENAMED},
        "settings": {"chunk_tokens": settings.chunk_tokens, "chunk_overlap_tokens": settings.chunk_overlap_tokens},
        "steps": steps,
        "equal_to_fresh_ingest": not diff,
        "differences": diff[:20],
        "targets": {
            "changed_chunks_embedded": "== chunks changed",
            "no_change_embed_calls": "== 0",
            "no_change_documents_written": "== 0",
        },
        "machine": machine_info(),
    }


def changed_chunks(before: dict[str, list[str]], after: dict[str, list[str]]) -> int:
    """Chunks of the edited files (`after`, by name) whose text their version before (`before`) did not hold."""
    return sum(len([t for t in texts if t not in set(before.get(name, []))]) for name, texts in after.items())


async def _chunks(store: VectorStore, collection: str) -> int:
    async with store.pool.acquire() as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.collection = $1",
                collection,
            )
        )


def render(report: dict[str, Any], console: Any) -> None:
    """The report as lines: each step's figures, then the equality check."""
    for name, figures in report["steps"].items():
        console.print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in figures.items()), markup=False)
    console.print(f"equal to a fresh ingest: {report['equal_to_fresh_ingest']}", markup=False)
    for line in report["differences"]:
        console.print(f"  {line}", markup=False)


def run_sync_bench_command(settings: Settings, files: int, as_json: bool, output: Path | None) -> None:
    """`rag bench sync`: run, write the JSON report (`output`), print it (`as_json`: the JSON object)."""
    log.setLevel(logging.INFO)
    emit_report(asyncio.run(run_sync_bench(settings, files)), as_json, output, render)
