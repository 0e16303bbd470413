"""`rag ingest`'s summary and JSON report of OCR'd pages, and the OCR settings reaching the ingest options, without
a server."""

from __future__ import annotations

import pytest

from agent.cli.ingest import file_lines, report_json
from agent.config.settings import Settings
from agent.core.wiring import ingest_options
from tools.extract.ocr import default_workers
from tools.ingest.report import IngestReport


def test_the_summary_and_json_give_pages_read_by_ocr_and_their_rate() -> None:
    report = IngestReport(pages=12, extract_s=8.0, ocr_pages=10, ocr_s=7.5)
    lines = file_lines(report)
    assert "PDF text extraction: 12 pages in 8.00 s, 1.5 pages/s" in lines
    assert "  of which OCR: 10 pages in 7.50 s, 1.33 pages/s" in lines
    body = report_json(report, 0, 0)
    assert (body["ocr_pages"], body["ocr_pages_per_s"]) == (10, 1.33)
    assert not any("OCR" in line for line in file_lines(IngestReport(pages=3, extract_s=1.0)))


def test_ocr_settings_become_the_ingest_options(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"OCR": "false", "OCR_LANGUAGE": "eng+deu", "OCR_DPI": "200", "OCR_MIN_CHARS": "5",
                        "OCR_WORKERS": "3"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    ocr = ingest_options(Settings()).ocr
    assert (ocr.enabled, ocr.language, ocr.dpi, ocr.min_chars, ocr.workers) == (False, "eng+deu", 200, 5, 3)
    monkeypatch.delenv("OCR_WORKERS")
    assert ingest_options(Settings()).ocr.workers == default_workers()
    monkeypatch.setenv("OCR_LANGUAGE", "eng; rm -rf /")
    with pytest.raises(ValueError, match="ocr_language"):
        Settings()
