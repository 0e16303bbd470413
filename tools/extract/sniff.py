"""The type of a document file from its first bytes, never from its name.

Signatures: PDF files start with `%PDF-` (ISO 32000-1 §7.5.2; readers accept it within the first 1024 bytes); DOCX is
a ZIP (local file header `PK\\x03\\x04`) holding `word/document.xml` (ECMA-376 Part 2, Open Packaging Conventions);
HTML is recognised as the WHATWG MIME Sniffing Standard (§7.1, "identifying a resource with an unknown MIME type")
does: after optional whitespace, one of its tag patterns (`<!DOCTYPE HTML`, `<HTML`, `<HEAD`, `<BODY`, `<P`, ...)
followed by a space or `>`, in whatever encoding the page is (`tools.extract.encoding`: byte order mark, UTF-8, or
a detected legacy encoding such as windows-1252). Other text is JSONL when named `.jsonl` (its reader then checks
every line) or when its first line is a JSON object with `_id` (a BEIR corpus under another name); else Markdown
when named `.md`/`.markdown` (both are text: the name only picks how headings are read); else plain text. A file
named as a text format (`.jsonl`, `.md`, `.txt`, ...: `tools.extract.formats`) that no encoding reads as text keeps
that kind, so that its reader says why. An OLE compound file (`ole`) is a legacy or password-encrypted Office
document. PNG (`\\x89PNG\\r\\n\\x1a\\n`, RFC 2083
§3.1), JPEG (`\\xff\\xd8\\xff`, a start-of-image marker and the next marker's prefix) and TIFF (`II*\\0` or `MM\\0*`,
TIFF 6.0 §2) are `image` (read by OCR). Anything else (other images, archives, other binary data) is `unsupported`.
"""

from __future__ import annotations

import codecs
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

from tools.extract.encoding import bom_encoding, text_encoding
from tools.extract.formats import FORMATS, TEXT_SUFFIXES, Kind

HEAD_BYTES = 8192
"""Bytes read to sniff a file."""
_HTML_TAGS = (
    "<!doctype html", "<html", "<head", "<script", "<iframe", "<h1", "<div", "<font", "<table", "<a",
    "<style", "<title", "<b", "<body", "<br", "<p", "<!--",
)  # fmt: skip
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
"""OLE compound file signature ([MS-CFB] §2.2): legacy .doc/.xls, and every password-encrypted Office document."""
_IMAGES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*")
"""PNG, JPEG and TIFF (little- and big-endian) signatures."""


def _is_html(head: str) -> bool:
    start = head.lstrip(" \t\n\r\x0c").lower()
    for tag in _HTML_TAGS:
        if start.startswith(tag):
            after = start[len(tag) : len(tag) + 1]
            if tag == "<!--" or after in (" ", ">"):
                return True
    return False


def _is_docx(path: Path | io.BytesIO) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return "word/document.xml" in archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return False


def _text_head(head: bytes) -> str | None:
    """The head as text (byte order mark, UTF-8 or a detected encoding; `tools.extract.encoding`), without a byte
    order mark; None for binary data."""
    bom = bom_encoding(head)
    if bom is None and head.count(b"\x00") * 10 > len(head):  # binary; a few stray NULs are removed from text later
        return None
    encoding = text_encoding(head, final=False)
    if encoding is None:
        return None
    return codecs.getincrementaldecoder(encoding)(errors="replace").decode(head[bom[1] if bom else 0 :])


def _beir_line(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(record, dict) and "_id" in record


def sniff(path: Path) -> Kind:
    """The kind of document in `path`, from its first `HEAD_BYTES` bytes (and, for a ZIP, its member names).

    Raises:
        OSError: the file cannot be read.
    """
    with path.open("rb") as handle:
        head = handle.read(HEAD_BYTES)
    return _kind(head, path.suffix.lower(), lambda: _is_docx(path))


def sniff_bytes(data: bytes, name: str) -> Kind:
    """`sniff` for content held in memory (an upload): `name` only picks among text kinds, as for a file."""
    return _kind(data[:HEAD_BYTES], Path(name).suffix.lower(), lambda: _is_docx(io.BytesIO(data)))


def _kind(head: bytes, suffix: str, is_docx: Callable[[], bool]) -> Kind:
    if not head:
        return "empty"
    if b"%PDF-" in head[:1024] or head.startswith(b"%PDF"):
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return "docx" if is_docx() else "zip"
    if head.startswith(_OLE):
        return "ole"
    if head.startswith(_IMAGES):
        return "image"
    text = _text_head(head)
    if text is None:  # a file named as text keeps its kind, so that its reader names the offending byte
        return TEXT_SUFFIXES.get(suffix, "unsupported")
    if _is_html(text):
        return "html"
    if suffix in FORMATS["jsonl"].suffixes or _beir_line(text):
        return "jsonl"
    return "markdown" if suffix in FORMATS["markdown"].suffixes else "text"
