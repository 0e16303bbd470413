"""What `rag ingest` shows: progress while it runs, then the files per type (stored, unchanged, skipped, failed)
with each failed or skipped file and its cause, PDF pages/s, counts and throughput.

Progress: when stdout is a terminal, a Rich progress bar (on stderr); otherwise log lines (`logging`, stderr) every
`LOG_EVERY_S` seconds with documents done, docs/s, chunks/s and the ETA.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

from agent.config.settings import Settings
from tools.ingest import IngestReport, ProgressFn

log = logging.getLogger("rag.ingest")
POOL_LOGGER = "asyncpg.pool"
"""asyncpg logs its pool's reconnection attempts (e.g. while Postgres restarts) at WARNING with a traceback."""
LOG_EVERY_S = 10.0


def _drop_traceback(record: logging.LogRecord) -> bool:
    record.exc_info, record.exc_text = None, None
    return True


def one_line_pool_warnings() -> None:
    """Keep asyncpg's pool warnings (`Failed to restore the pool connection floor; retrying`) to one line each:
    the ingest's own error already says what failed and what to do."""
    pool_log = logging.getLogger(POOL_LOGGER)
    if _drop_traceback not in pool_log.filters:
        pool_log.addFilter(_drop_traceback)


@dataclass
class IngestTally:
    """What a run has stored so far, as its progress callback last reported it (`track`): documents handled (stored,
    skipped as already stored, or failed) of `total`, and chunks written by this run."""

    documents: int = 0
    total: int = 0
    chunks: int = 0

    def track(self, progress: ProgressFn) -> ProgressFn:
        """`progress`, also recording each report in this tally."""

        def tracked(done: int, total: int, chunks: int) -> None:
            self.documents, self.total, self.chunks = done, total, chunks
            progress(done, total, chunks)

        return tracked

    def kept(self) -> str:
        """What a failed or interrupted run keeps, and whether running it again resumes it (only when something
        is stored: a run that stored nothing starts over)."""
        if self.chunks:
            return (
                f"the {self.chunks} chunks stored ({self.documents} of {self.total} documents done) are kept: "
                "run the same ingest again to resume"
            )
        if self.documents:
            return (
                f"nothing new was stored ({self.documents} of {self.total} documents were stored before): "
                "run the same ingest again to resume"
            )
        return "nothing was stored"


@contextmanager
def ingest_progress(console: Console, terminal: bool, label: str = "ingest") -> Iterator[ProgressFn]:
    """A progress callback for `RagApp.ingest` (and `rag sync`, `label` "sync"): a Rich bar drawn on `console` when
    `terminal` (stdout is a terminal), else log lines every `LOG_EVERY_S` seconds. Either way a long OCR logs its
    pages as it goes (INFO lines of `tools.extract`, every `tools.extract.ocr.PROGRESS_EVERY_S` seconds)."""
    logging.getLogger("tools.extract").setLevel(logging.INFO)
    if terminal:
        with Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("ingest", total=None, rate="")

            def update(done: int, total: int, chunks: int) -> None:
                elapsed = progress.tasks[0].elapsed or 1e-9
                rate = f"{done / elapsed:.1f} docs/s, {chunks / elapsed:.1f} chunks/s"
                progress.update(task, completed=done, total=total, rate=rate)

            yield update
        return

    log.setLevel(logging.INFO)
    start = time.perf_counter()
    last = start

    def log_update(done: int, total: int, chunks: int) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last < LOG_EVERY_S and done < total:
            return
        last = now
        elapsed = max(now - start, 1e-9)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else float("inf")
        log.info("%d/%d documents, %.1f docs/s, %.1f chunks/s, ETA %.0f s", done, total, rate, chunks / elapsed, eta)

    yield log_update


def report_json(report: IngestReport, stored_documents: int, stored_chunks: int) -> dict[str, object]:
    """The `rag ingest --json` object: documents, added, skipped, chunks, failed (chunks), files (per type:
    stored, unchanged, skipped, failed), file_errors (path, kind, reason), pages, pages_per_s, ocr_pages,
    ocr_pages_per_s, wall_s, stored_documents, stored_chunks."""
    return {
        "documents": report.documents,
        "added": report.added,
        "skipped": report.skipped,
        "chunks": report.chunks,
        "failed": [{"doc_id": b.doc_id, "chunk_index": b.chunk_index, "reason": b.reason} for b in report.failed],
        "files": {kind: vars(counts) for kind, counts in sorted(report.files.items())},
        "file_errors": [{"path": e.path, "kind": e.kind, "reason": e.reason} for e in report.file_errors],
        "pages": report.pages,
        "pages_per_s": round(report.pages_per_s, 1),
        "ocr_pages": report.ocr_pages,
        "ocr_pages_per_s": round(report.ocr_pages_per_s, 2),
        "wall_s": round(report.wall_s, 3),
        "stored_documents": stored_documents,
        "stored_chunks": stored_chunks,
    }


def file_lines(report: IngestReport) -> list[str]:
    """Per type, the files stored, unchanged, skipped and failed; then each failed or skipped file with its
    cause; then the PDF and image extraction throughput (pages/s) when any was read, and the OCR throughput when
    pages were OCR'd."""
    lines = []
    for kind, c in sorted(report.files.items()):
        lines.append(
            f"{kind}: {c.stored} stored, {c.unchanged} unchanged, {c.skipped} skipped, {c.failed} failed (files)"
        )
    lines += [f"  {'skipped' if e.kind == 'unsupported' else 'failed'}: {e.reason}" for e in report.file_errors]
    if report.pages:
        lines.append(
            f"PDF text extraction: {report.pages} pages in {report.extract_s:.2f} s, {report.pages_per_s:.1f} pages/s"
        )
    if report.ocr_pages:
        lines.append(
            f"  of which OCR: {report.ocr_pages} pages in {report.ocr_s:.2f} s, {report.ocr_pages_per_s:.2f} pages/s"
        )
    return lines


def report_lines(report: IngestReport, settings: Settings) -> list[str]:
    """The summary of one run: files per type and their errors (`file_lines`), counts, failed chunks, docs/s and
    chunks/s with the settings that bound them."""
    lines = [
        *file_lines(report),
        f"added {report.added} documents ({report.chunks} chunks), skipped {report.skipped} already stored"
        + (f", {len({b.doc_id for b in report.failed})} not stored (failed chunks below)" if report.failed else ""),
    ]
    lines += [f"  not stored: document {b.doc_id!r} chunk {b.chunk_index}: {b.reason}" for b in report.failed]
    lines.append(
        f"{report.docs_per_s:.1f} docs/s, {report.chunks_per_s:.1f} chunks/s in {report.wall_s:.1f} s "
        f"(INGEST_BATCH_DOCS={settings.ingest_batch_docs}, INGEST_MAX_IN_FLIGHT={settings.ingest_max_in_flight})"
    )
    return lines
