"""PDFium's worker process (`tools.extract.pdfium_worker.PdfiumWorker`): a call runs in a process of its own, and a
worker that dies fails only its call, naming the file, after one retry; the next call gets a new worker. No server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.extract import ExtractError
from tools.extract.pdfium_worker import WORKER_DEATHS, PdfiumWorker


def test_a_call_runs_in_the_worker_and_a_dying_worker_fails_only_its_call() -> None:
    worker = PdfiumWorker()
    try:
        first = worker.call(os.getpid, path=Path("a.pdf"))
        assert first != os.getpid() and worker.worker_pids() == {first}
        with pytest.raises(ExtractError, match=rf"crash\.pdf: .*worker process died .*\({WORKER_DEATHS} times"):
            worker.call(os._exit, 3, path=Path("crash.pdf"))
        second = worker.call(os.getpid, path=Path("b.pdf"))
        assert second not in (first, os.getpid()) and worker.worker_pids() == {second}
    finally:
        worker.close()
    assert worker.worker_pids() == set()
