"""PDFium's worker process: every call into PDFium (`pypdfium2`) runs in a process of its own.

PDFium is not thread-safe, and a malformed or hostile PDF can crash it (a segfault ends the process). A
`PdfiumWorker` runs module-level functions (reading a PDF's text, `tools.extract.pdf.extract_here`; rendering a
page, `tools.render_page.render_here`) in a `ProcessPoolExecutor` started with `spawn`, where `PDFIUM_LOCK`
serialises the calls into PDFium. A worker that dies fails the call it was running (`ExtractError`, after one retry
that spares the calls queued behind it) and the next call starts a new one; the calling process (`rag serve`, an
ingest) goes on.
"""

from __future__ import annotations

import logging
import logging.handlers
import multiprocessing
import multiprocessing.queues
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TypeVar

from tools.extract.base import ExtractError

PDFIUM_LOCK = threading.Lock()
"""Held around every use of PDFium in a process (open, read, render, close): PDFium is not thread-safe."""
WORKER_DEATHS = 2
"""Tries of one call when its worker process dies under it: the second death fails the call (a file that crashes
PDFium is not retried forever; the first retry spares the calls that were queued behind it)."""
T = TypeVar("T")


def _ignore_interrupts(records: multiprocessing.queues.Queue[logging.LogRecord] | None = None) -> None:
    """Initializer of each worker process: SIGINT is ignored there. A Ctrl+C in a terminal (or a supervisor's SIGINT
    to the process group) reaches the workers too; the server that owns them shuts its pool down itself, so a
    worker must neither die mid-file nor print a KeyboardInterrupt traceback of its own. The `tools.extract`
    loggers' INFO records (OCR progress) go to the owner through `records` (the logging cookbook's QueueHandler)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if records is not None:
        logger = logging.getLogger("tools.extract")
        logger.setLevel(logging.INFO)
        logger.addHandler(logging.handlers.QueueHandler(records))
        logger.propagate = False


class _Forward(logging.Handler):
    """A record from a worker process, handed to the logger of its name here (whose level and handlers decide)."""

    def emit(self, record: logging.LogRecord) -> None:
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)


class PdfiumWorker:
    """Calls into PDFium in a worker process: PDFium's crashes and its thread-unsafety stay out of the caller.

    One `ProcessPoolExecutor` (`max_workers` processes, `spawn` start method: no copy of the caller's threads, locks
    or event loop; SIGINT ignored, the owner stops them), started at the first call. Callers block in `call` (call
    it from a thread, as the ingest pipeline and the page renderer do); their calls queue for the workers. A worker
    that dies (BrokenProcessPool: every call queued on the pool fails with it) is replaced by a new pool, and each
    call it failed is tried once more; a call under which workers died `WORKER_DEATHS` times fails with
    `ExtractError` naming its file. Thread-safe. What the workers log under `tools.extract` (OCR progress) is
    logged here, by the logger of the same name, through a queue (`logging.handlers.QueueListener`, one per pool).

    Args:
        max_workers: worker processes (PDFium is serialised within each, `PDFIUM_LOCK`).
    """

    def __init__(self, max_workers: int = 1) -> None:
        self.max_workers = max_workers
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._listener: logging.handlers.QueueListener | None = None
        self._generation = 0

    def _current(self) -> tuple[ProcessPoolExecutor, int]:
        with self._lock:
            if self._pool is None:
                context = multiprocessing.get_context("spawn")
                records: multiprocessing.queues.Queue[logging.LogRecord] = context.Queue()
                records.cancel_join_thread()  # a worker that died writing must not hold up this process's exit
                self._listener = logging.handlers.QueueListener(records, _Forward())
                self._listener.start()
                self._pool = ProcessPoolExecutor(
                    self.max_workers, mp_context=context, initializer=_ignore_interrupts, initargs=(records,)
                )
            return self._pool, self._generation

    def _replace(self, generation: int) -> None:
        """Drop the broken pool of `generation` (once, whichever caller sees it first); the next call starts one."""
        with self._lock:
            if self._generation != generation or self._pool is None:
                return
            broken, self._pool = self._pool, None
            self._generation += 1
            listener, self._listener = self._listener, None
        if listener is not None:  # its thread ends at the sentinel; not waited for (a dead worker may hold the queue)
            listener.enqueue_sentinel()
        broken.shutdown(wait=False, cancel_futures=True)

    def call(self, fn: Callable[..., T], *args: object, path: Path) -> T:
        """`fn(*args)` run by a worker process (another use of PDFium on the file `path`, e.g. rendering one of
        its pages); blocks until it is done. `fn` must be a module-level function, its arguments and result
        picklable.

        Raises:
            ExtractError: the worker process died under this call `WORKER_DEATHS` times (names `path`).
            Exception: what `fn` raises.
        """
        for _ in range(WORKER_DEATHS):
            pool, generation = self._current()
            try:
                return pool.submit(fn, *args).result()
            except BrokenProcessPool:
                self._replace(generation)
        raise ExtractError(
            f"{path}: the PDF reader's worker process died while reading this file ({WORKER_DEATHS} times: PDFium "
            "crashed on it, a malformed or hostile PDF); it is not retried, and the other files go on"
        )

    def worker_pids(self) -> set[int]:
        """Process ids of the current pool's workers (empty before the first call or after `close`)."""
        with self._lock:
            pool = self._pool
        return set() if pool is None else {p.pid for p in pool._processes.values() if p.pid is not None}

    def close(self) -> None:
        """Stop the workers (waits for the calls they are running); a later call starts new ones."""
        with self._lock:
            pool, self._pool = self._pool, None
            listener, self._listener = self._listener, None
            self._generation += 1
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if listener is not None:
            listener.stop()
