"""A PDF extraction target for the crash tests (`tools.extract.pdf.PdfExtractor(target=...)`): it runs in the
extractor's spawned worker process, so it lives in an importable module. A file whose name starts with `crash`
kills the worker process the way a PDFium segfault would (no exception, no cleanup); any other file is extracted."""

from __future__ import annotations

import os

from tools.extract.base import Extracted
from tools.extract.ocr import OcrOptions
from tools.extract.pdf import extract_here


def crash_on_marker(path: str, ocr: OcrOptions | None = None) -> Extracted:
    """`extract_here(path, ocr)`, or the worker's sudden death (`os._exit(70)`) for a file named `crash*`."""
    if os.path.basename(path).startswith("crash"):
        os._exit(70)
    return extract_here(path, ocr)
