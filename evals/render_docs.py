"""SciFact documents rendered as the files people keep: HTML pages (with navigation and a footer to remove), PDFs
printed by headless Debian Chromium (Playwright driving `/usr/bin/chromium`, never a downloaded browser) and DOCX
written by python-docx, and scans: printed PDFs rasterised by PDFium and rebuilt as image-only PDFs by Pillow (no
text layer, as a scanner makes them). Used by the format-fidelity eval, the extraction benchmark and the OCR tests."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import docx

from evals.scifact import CorpusDoc

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
NAV = '<nav><a href="/">Home</a> | <a href="/browse">Browse journals</a> | <a href="/login">Sign in</a></nav>'
FOOTER = "<footer>Copyright 2026 Example Publishing. Privacy policy. Cookie settings. Contact us.</footer>"
"""Boilerplate of every rendered web page: the HTML extractor is expected to drop it."""


def article_html(doc: CorpusDoc, boilerplate: bool) -> str:
    """`doc` as a web page: `<title>` and `<h1>` the title, the abstract in a `<p>`, optionally inside navigation
    and a footer."""
    title, text = html.escape(doc.title), html.escape(doc.text)
    body = f"<article><h1>{title}</h1><p>{text}</p></article>"
    if boilerplate:
        body = f"{NAV}{body}{FOOTER}"
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>{body}</body></html>"


def book_html(docs: Sequence[CorpusDoc]) -> str:
    """Every document of `docs` on a page of its own (CSS `break-before: page`), in order."""
    pages = "".join(
        f"<section style='break-before: page'><h2>{html.escape(d.title)}</h2><p>{html.escape(d.text)}</p></section>"
        for d in docs
    )
    head = "<head><meta charset='utf-8'><title>Collected abstracts</title></head>"
    return f"<!doctype html><html>{head}<body>{pages}</body></html>"


def write_docx(doc: CorpusDoc, out: Path) -> None:
    """`doc` as a Word document: the title as a level-1 heading, the abstract as one paragraph."""
    document = docx.Document()
    document.core_properties.title = doc.title
    document.add_heading(doc.title, level=1)
    document.add_paragraph(doc.text)
    document.save(str(out))


async def print_pdfs(pages: Sequence[tuple[str, Path]]) -> None:
    """Print each (HTML, output path) to PDF (A4, no header or footer) in one headless Chromium.

    Raises:
        FileNotFoundError: `/usr/bin/chromium` is missing (`apt-get install chromium`).
    """
    if not Path(CHROMIUM).is_file():  # noqa: ASYNC240 (one stat before a browser start)
        raise FileNotFoundError(f"{CHROMIUM} missing: apt-get install -y chromium (Debian package)")
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = await browser.new_page()
            for content, out in pages:
                await page.set_content(content, wait_until="load")
                await page.pdf(path=str(out), format="A4", print_background=False)
        finally:
            await browser.close()


def scan_pdf(source: Path, out: Path, dpi: int = 300) -> Path:
    """`source` as a scanner would give it: each page rendered by PDFium in grey levels at `dpi` and the images
    written by Pillow as an image-only PDF `out` (no text layer; each page the size of the original, in points).

    Raises:
        pypdfium2.PdfiumError: `source` is not a readable PDF.
    """
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(source)
    try:
        images = [document[i].render(scale=dpi / 72, grayscale=True).to_pil() for i in range(len(document))]
    finally:
        document.close()
    images[0].save(out, "PDF", resolution=float(dpi), save_all=True, append_images=images[1:])
    return out


async def render(docs: Sequence[CorpusDoc], root: Path, book: Sequence[CorpusDoc] = ()) -> dict[str, Path]:
    """Write `docs` under `root` as `jsonl/corpus.jsonl`, `html/<id>.html` (with boilerplate), `pdf/<id>.pdf`
    and `docx/<id>.docx`, and `book` (if any) as `book/book.pdf`, one document per page. Returns format -> folder."""
    import json

    folders = {name: root / name for name in ("jsonl", "html", "pdf", "docx", "book")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    with (folders["jsonl"] / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for d in docs:
            handle.write(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
    for d in docs:
        (folders["html"] / f"{d.doc_id}.html").write_text(article_html(d, boilerplate=True), encoding="utf-8")
        write_docx(d, folders["docx"] / f"{d.doc_id}.docx")
    pages = [(article_html(d, boilerplate=False), folders["pdf"] / f"{d.doc_id}.pdf") for d in docs]
    if book:
        pages.append((book_html(book), folders["book"] / "book.pdf"))
    await print_pdfs(pages)
    return folders
