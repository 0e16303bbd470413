"""Extraction libraries compared on real files for speed and fidelity: the measurement behind `tools/extract`'s
choices (`rag bench extract`).

- PDF: PDFium (`pypdfium2`, chosen) against `pypdf`, on the PDFs Debian ships (`/usr/share/doc/**/*.pdf`: manuals
  typeset by TeX) and on SciFact abstracts printed by headless Chromium. Speed: pages/s of the text layer, page by
  page, one thread. Fidelity on the printed abstracts: difflib's `SequenceMatcher.ratio()` between the source's
  words (title and abstract) and the extracted words (2·matches / total; 1.0 is exact).
- HTML: `trafilatura` (chosen) against `markitdown` (HTML to Markdown, no boilerplate removal), on SciFact abstracts
  rendered as web pages with navigation and a footer: docs/s, the same word ratio, and the share of pages whose
  boilerplate (the footer's "Cookie settings") leaked into the text.
- DOCX: `python-docx` (chosen; markitdown needs `mammoth`, not installed): docs/s and the word ratio.
- OCR: the printed abstracts scanned (rasterised by PDFium at `dpi`, rebuilt as image-only PDFs;
  `evals.render_docs.scan_pdf`) and read back by `tools.extract.pdf` with Tesseract (`tools.extract.ocr`,
  `workers` tesseract processes): pages/s of the OCR (rendering included) and the same word ratio.

Timings are wall time on this machine while other jobs ran (shared 2-core machine): compare ratios within one run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import difflib
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evals.render_docs import render, scan_pdf
from evals.scifact import CorpusDoc, load_corpus

DEBIAN_PDFS = Path("/usr/share/doc")
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (`\\w+`)."""
    return [w.lower() for w in _WORD.findall(text)]


def word_ratio(source: str, extracted: str) -> float:
    """difflib `SequenceMatcher.ratio()` of the two texts' word sequences, in [0, 1]."""
    return difflib.SequenceMatcher(None, words(source), words(extracted), autojunk=False).ratio()


def pdfium_pages(path: Path) -> list[str]:
    """Text of each page with PDFium (as `tools.extract.pdf`)."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(path)
    try:
        out = []
        for i in range(len(document)):
            page = document[i]
            textpage = page.get_textpage()
            out.append(textpage.get_text_range())
            textpage.close()
            page.close()
        return out
    finally:
        document.close()


def pypdf_pages(path: Path) -> list[str]:
    """Text of each page with pypdf."""
    import pypdf

    return [page.extract_text() for page in pypdf.PdfReader(path).pages]


def _timed(fn: Callable[[Path], Any], paths: Sequence[Path]) -> tuple[list[Any], float]:
    start = time.perf_counter()
    out = [fn(p) for p in paths]
    return out, time.perf_counter() - start


def bench_pdf(printed: Sequence[Path], sources: Sequence[CorpusDoc]) -> dict[str, Any]:
    """pages/s on Debian's PDFs and on the printed abstracts, and the word ratio on the latter, per library."""
    debian = sorted(DEBIAN_PDFS.glob("**/*.pdf"))
    results: dict[str, Any] = {"debian_files": [str(p) for p in debian]}
    for name, fn in (("pypdfium2", pdfium_pages), ("pypdf", pypdf_pages)):
        real, real_s = _timed(fn, debian)
        ours, ours_s = _timed(fn, printed)
        real_pages = sum(len(p) for p in real)
        printed_pages = sum(len(p) for p in ours)
        ratios = [word_ratio(f"{d.title} {d.text}", " ".join(p)) for d, p in zip(sources, ours, strict=True)]
        results[name] = {
            "debian_pages": real_pages,
            "debian_pages_per_s": round(real_pages / real_s, 1) if real_s else 0.0,
            "printed_pages": printed_pages,
            "printed_pages_per_s": round(printed_pages / ours_s, 1),
            "word_ratio_mean": round(sum(ratios) / len(ratios), 4),
            "word_ratio_min": round(min(ratios), 4),
        }
    return results


def bench_html(pages: Sequence[Path], sources: Sequence[CorpusDoc]) -> dict[str, Any]:
    """docs/s, word ratio and boilerplate leaks of trafilatura (via `tools.extract.html`) and markitdown."""
    from markitdown import MarkItDown

    from tools.extract.html import extract_html

    converter = MarkItDown(enable_plugins=False)
    libraries: dict[str, Callable[[Path], str]] = {
        "trafilatura": lambda p: extract_html(p, p.read_bytes()).text,
        "markitdown": lambda p: converter.convert_local(str(p)).markdown,
    }
    results: dict[str, Any] = {}
    for name, fn in libraries.items():
        texts, seconds = _timed(fn, pages)
        ratios = [word_ratio(f"{d.title} {d.text}", t) for d, t in zip(sources, texts, strict=True)]
        results[name] = {
            "docs_per_s": round(len(texts) / seconds, 1),
            "word_ratio_mean": round(sum(ratios) / len(ratios), 4),
            "boilerplate_leaked": round(sum("Cookie settings" in t for t in texts) / len(texts), 4),
        }
    return results


def bench_docx(files: Sequence[Path], sources: Sequence[CorpusDoc]) -> dict[str, Any]:
    """docs/s and word ratio of python-docx (via `tools.extract.docx`)."""
    from tools.extract.docx import extract_docx

    texts, seconds = _timed(lambda p: extract_docx(p).text, files)
    ratios = [word_ratio(f"{d.title} {d.text}", t) for d, t in zip(sources, texts, strict=True)]
    return {
        "python-docx": {
            "docs_per_s": round(len(texts) / seconds, 1),
            "word_ratio_mean": round(sum(ratios) / len(ratios), 4),
        }
    }


def bench_ocr(printed: Sequence[Path], sources: Sequence[CorpusDoc], dpi: int, work: Path) -> dict[str, Any]:
    """pages/s and word ratio of OCR (Tesseract) on the printed abstracts scanned at `dpi`, read in this process
    with `tools.extract.ocr.default_workers()` tesseract processes."""
    import pytesseract

    from tools.extract.ocr import OcrOptions
    from tools.extract.pdf import extract_here

    options = OcrOptions(dpi=dpi)
    scans = [scan_pdf(p, work / f"scan-{p.name}", dpi) for p in printed]
    extracted, _ = _timed(lambda p: extract_here(p, options), scans)
    ocr_s = sum(e.ocr_s for e in extracted)
    pages = sum(e.ocr_pages for e in extracted)
    ratios = [word_ratio(f"{d.title} {d.text}", e.text) for d, e in zip(sources, extracted, strict=True)]
    return {
        "tesseract": str(pytesseract.get_tesseract_version()),
        "language": options.language,
        "dpi": dpi,
        "workers": options.workers,
        "pages": pages,
        "pages_per_s": round(pages / ocr_s, 2) if ocr_s else 0.0,
        "word_ratio_mean": round(sum(ratios) / len(ratios), 4),
        "word_ratio_min": round(min(ratios), 4),
    }


def run_extract_bench(docs: int, ocr_docs: int = 20, ocr_dpi: int = 300) -> dict[str, Any]:
    """Render the first `docs` SciFact abstracts in every format and measure each library, and OCR on the first
    `ocr_docs` scanned at `ocr_dpi` (see the module docstring). Returns the results object of
    `evals/results/extract-bench.json`.

    Raises:
        FileNotFoundError: no Chromium to print PDFs.
    """
    sources = list(load_corpus().values())[:docs]
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rag-extract-bench-") as work:
        folders = asyncio.run(render(sources, Path(work)))
        printed = [folders["pdf"] / f"{d.doc_id}.pdf" for d in sources]
        pages = [folders["html"] / f"{d.doc_id}.html" for d in sources]
        files = [folders["docx"] / f"{d.doc_id}.docx" for d in sources]
        return {
            "date": dt.date.today().isoformat(),
            "documents": len(sources),
            "conditions": f"shared {os.cpu_count()}-core machine, 1-minute load average {load:.1f} at the start; "
            "wall time; one thread (OCR: its tesseract processes)",
            "pdf": bench_pdf(printed, sources),
            "html": bench_html(pages, sources),
            "docx": bench_docx(files, sources),
            "ocr": bench_ocr(printed[:ocr_docs], sources[:ocr_docs], ocr_dpi, Path(work)),
        }
