"""Real document files for the ingestion tests, made by the tools people make them with: PDFs printed by headless
Debian Chromium, DOCX written by python-docx, encrypted, empty and turned (`/Rotate`) PDFs written by pypdf."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import docx
import pypdf

from tests import external_tools

CHROMIUM = "/usr/bin/chromium"
PRINT_TIMEOUT_S = 120
"""A bound on one print, so a hung browser fails the test instead of hanging it (not a race: printing has no
deadline of its own)."""

GUIDE_HTML = """<!doctype html><html><head><title>Handbook</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About us</a> | <a href="/jobs">Jobs</a></nav>
<h1>Guide</h1><p>Welcome to the guide. It explains the product, from installation to daily use.</p>
<h2>Install</h2><p>Installation takes a few minutes on every platform we support today.</p>
<h3>Linux</h3><p>On Linux, the package manager installs the zebrafish package with one command.</p>
<div style="break-before: page"></div>
<h3>Windows</h3><p>On Windows, the installer asks for an administrator account before the quokka service starts.</p>
<footer>Copyright 2026 Example Corp. All rights reserved. Cookie settings.</footer>
</body></html>
"""
"""Two printed pages: `zebrafish` on page 1, `quokka` on page 2; navigation and footer are boilerplate."""


def print_pdf(html: str, out: Path) -> Path:
    """`html` printed to the PDF `out` by headless Chromium (`--print-to-pdf`, no header or footer)."""
    external_tools.chromium()
    page = out.with_suffix(".print.html")
    page.write_text(html, encoding="utf-8")
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--no-pdf-header-footer",
            f"--print-to-pdf={out}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=PRINT_TIMEOUT_S,
    )
    page.unlink()
    return out


TABLE_HTML = """<!doctype html><html><head><style>
body { font-family: "DejaVu Serif"; font-size: 14pt; } td { padding: 0 12mm 0 0; }
</style></head><body>
<p>Nutrients per serving, first line about quokkas on islands.</p>
<p>Second line about numbats eating termites.</p>
<table><tr><td>vitamin D</td><td>112</td><td>pelican</td></tr><tr><td>iron</td><td>87</td><td>heron</td></tr></table>
</body></html>
"""
"""One printed page: two lines, then a table of two rows whose cells stand apart (no separator but the gap)."""


def turned_pdf(source: Path, out: Path, rotate: int, *, upright: bool) -> Path:
    """The first page of `source` given `/Rotate rotate` (clockwise degrees, a multiple of 90), as pypdf writes it.
    With `upright`, its content is first turned the other way (`transfer_rotation_to_content`), so that the page is
    shown exactly as `source`'s (a landscape table stored turned on its sheet, shown upright); else the page is
    shown turned (a sheet scanned or printed sideways)."""
    writer = pypdf.PdfWriter(clone_from=str(source))
    for drop in range(len(writer.pages) - 1, 0, -1):
        writer.remove_page(drop)
    page = writer.pages[0]
    if upright:
        page.rotate(-rotate % 360)
        page.transfer_rotation_to_content()
    page.rotate(rotate)
    writer.write(str(out))
    return out


def guide_docx(out: Path) -> Path:
    """A Word document: title, headings on three levels, paragraphs and a table."""
    document = docx.Document()
    document.add_heading("Guide", level=1)
    document.add_paragraph("Welcome to the guide. It explains the product, from installation to daily use.")
    document.add_heading("Install", level=2)
    document.add_paragraph("Installation takes a few minutes on every platform we support today.")
    document.add_heading("Linux", level=3)
    document.add_paragraph("On Linux, the package manager installs the zebrafish package with one command.")
    table = document.add_table(rows=2, cols=2)
    for (row, col), text in {(0, 0): "Distribution", (0, 1): "Command", (1, 0): "Debian", (1, 1): "apt"}.items():
        table.cell(row, col).text = text
    document.add_heading("Windows", level=3)
    document.add_paragraph("On Windows, the installer asks for an administrator account before the quokka service.")
    document.save(str(out))
    return out


def encrypted_pdf(source: Path, out: Path, password: str = "secret") -> Path:
    """`source` encrypted with a user password (AES-256, pypdf)."""
    writer = pypdf.PdfWriter(clone_from=str(source))
    writer.encrypt(user_password=password, owner_password=password, algorithm="AES-256")
    writer.write(str(out))
    return out


def empty_pdf(out: Path) -> Path:
    """A valid PDF with no pages."""
    pypdf.PdfWriter().write(str(out))
    return out


def zip_named(out: Path) -> Path:
    """A ZIP archive (of a text file) under the name `out`."""
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("notes.txt", "a text file inside a ZIP archive")
    return out
