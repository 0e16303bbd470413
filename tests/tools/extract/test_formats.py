"""The format registry is the one list of document formats: sniffing, dispatch, the suffixes that claim a format and
the refusals read it, and the pages and help texts that list the formats name every one. Pure logic, no server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from tests.conftest import REPO_ROOT
from tools.extract import DOCUMENT_KINDS, DOCUMENT_SUFFIXES, FORMATS, REFUSED, ExtractError, extract, sniff_bytes
from tools.extract.formats import FORMAT_NAMES, TEXT_SUFFIXES, Kind, format_of, is_paged, is_renderable, is_structured
from tools.ingest.inputs import InputFile

LISTS = {
    "README.md": "documents come in as",
    "docs/cli.md": "rag ingest docs/ handbook.pdf",
    "docs/ingestion.md": "- **Formats**",
    "docs/own-llm-and-documents.md": "rag ingest ~/my-documents/",
    "agent/cli/main.py": "Files or folders (walked recursively)",
    "agent/http/web/index.html": '<div id="drop">',
    "tools/extract/__init__.py": "Text and structure out of document files",
}
"""Where the formats are listed in prose: a file and the start of its list (it runs to the next blank line or
bullet)."""


def listed(path: str, start: str) -> str:
    text = (REPO_ROOT / path).read_text(encoding="utf-8")
    assert text.count(start) == 1, f"{path}: expected one {start!r}"
    tail = text[text.index(start) :]
    return re.split(r"\n\s*\n|\n\s*- ", tail, maxsplit=1)[0]


@pytest.mark.parametrize("path", sorted(LISTS))
def test_every_list_of_formats_names_every_format(path: str) -> None:
    text = listed(path, LISTS[path]).lower()
    missing = [f.name for f in FORMATS.values() if f.name.split("/")[0].split()[0].lower() not in text]
    assert missing == [], f"{path} lists the formats without {missing}"


def test_the_registry_covers_the_document_kinds_and_the_refusals_the_rest() -> None:
    assert set(DOCUMENT_KINDS) | set(REFUSED) == set(get_args(Kind))
    assert not set(DOCUMENT_KINDS) & set(REFUSED)
    assert len(DOCUMENT_SUFFIXES) == len(set(DOCUMENT_SUFFIXES)), "a suffix claims two formats"
    assert all(s.startswith(".") and s == s.lower() for s in DOCUMENT_SUFFIXES)
    assert FORMAT_NAMES == "PDF, HTML, DOCX, Markdown, text, JSONL or PNG/JPEG/TIFF images"
    assert FORMAT_NAMES in REFUSED["unsupported"] and FORMAT_NAMES in REFUSED["zip"]
    assert TEXT_SUFFIXES == {
        ".md": "markdown",
        ".markdown": "markdown",
        ".txt": "text",
        ".text": "text",
        ".jsonl": "jsonl",
    }


def test_flags_read_the_registry() -> None:
    assert [k for k in DOCUMENT_KINDS if is_renderable(k)] == ["pdf", "image"]
    assert [k for k in DOCUMENT_KINDS if is_paged(k)] == ["pdf", "image"]
    assert [k for k in DOCUMENT_KINDS if is_structured(k)] == ["pdf", "html", "docx", "image"]
    assert format_of("zip") is None and not is_renderable("zip") and not is_structured("unsupported")
    assert (
        InputFile(Path("a.pdf"), "a.pdf", kind="pdf").paged
        and InputFile(Path("a.md"), "a.md", kind="markdown").structured is False
    )
    assert InputFile(Path("a.tiff"), "a.tiff", kind="unsupported").supported  # its name claims an image
    assert not InputFile(Path("a.bin"), "a.bin", kind="unsupported").supported


def test_the_name_picks_among_text_formats_only() -> None:
    assert sniff_bytes(b"# Title\n\nbody", "notes.md") == "markdown"
    assert sniff_bytes(b"# Title\n\nbody", "notes.markdown") == "markdown"
    assert sniff_bytes(b"# Title\n\nbody", "notes.txt") == "text"
    assert sniff_bytes(b'{"_id": "1", "text": "a"}\n', "corpus.txt") == "jsonl"
    assert sniff_bytes(b"\x00\x01\x02\x03" * 64, "notes.md") == "markdown"  # its reader names the offending byte
    assert sniff_bytes(b"\x00\x01\x02\x03" * 64, "photo.png") == "unsupported"  # an image is sniffed, not named


def test_dispatch_reads_by_the_registry_and_refuses_the_rest(tmp_path: Path) -> None:
    note = tmp_path / "note.md"
    note.write_text("# Heading\n\nA paragraph.\n", encoding="utf-8")
    extracted = extract(note, "markdown", max_bytes=1000)
    assert extracted.title == "Heading" and "A paragraph." in extracted.text
    plain = tmp_path / "plain.txt"
    plain.write_text("Just text.", encoding="utf-8")
    assert extract(plain, "text", max_bytes=1000).text == "Just text."
    with pytest.raises(ExtractError, match="jsonl content is not read as one document"):
        extract(plain, "jsonl", max_bytes=1000)
    with pytest.raises(ExtractError, match=re.escape(f"(expected {FORMAT_NAMES})")):
        extract(plain, "unsupported", max_bytes=1000)
    with pytest.raises(ExtractError, match="over the limit of 4 bytes"):
        extract(plain, "text", max_bytes=4)
