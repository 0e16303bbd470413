"""`tools.ingest.ports.KeptOriginals`: the in-memory originals and the file system's (`tools.originals.Originals`)
answer alike (keep from bytes or a file, replace, move, remove, collections apart, invalid collections refused, a
file that cannot be kept left out by `keep_files`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tools.ingest.ports import KeptOriginals
from tools.scope import ScopeError


def test_an_original_is_kept_from_bytes_or_a_file_and_replaced(kept_originals: KeptOriginals, tmp_path: Path) -> None:
    source = tmp_path / "guide.pdf"
    source.write_bytes(b"%PDF-1.7 the guide")
    assert kept_originals.read("kb", "guide.pdf") is None
    kept_originals.keep("kb", "guide.pdf", source)
    kept_originals.keep("kb", "notes.md", b"# Notes\n")
    assert kept_originals.read("kb", "guide.pdf") == b"%PDF-1.7 the guide"
    assert kept_originals.read("kb", "notes.md") == b"# Notes\n"
    assert kept_originals.read("hr", "notes.md") is None  # another collection
    kept_originals.keep("kb", "notes.md", b"# Notes, edited\n")
    assert kept_originals.read("kb", "notes.md") == b"# Notes, edited\n"


def test_an_original_moves_and_is_removed_with_its_document(kept_originals: KeptOriginals) -> None:
    kept_originals.keep("kb", "a.md", b"alpha")
    kept_originals.keep("kb", "b.md", b"beta")
    kept_originals.move("kb", "a.md", "b.md")  # a rename over another document replaces its original
    assert (kept_originals.read("kb", "a.md"), kept_originals.read("kb", "b.md")) == (None, b"alpha")
    kept_originals.move("kb", "gone.md", "c.md")  # none kept: nothing happens
    assert kept_originals.read("kb", "c.md") is None
    assert kept_originals.remove("kb", "b.md") is True
    assert kept_originals.remove("kb", "b.md") is False
    assert kept_originals.read("kb", "b.md") is None


def test_keep_files_leaves_out_a_file_that_cannot_be_read(
    kept_originals: KeptOriginals, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    there = tmp_path / "there.txt"
    there.write_bytes(b"here")
    with caplog.at_level(logging.WARNING):
        kept_originals.keep_files("kb", [("missing.txt", tmp_path / "missing.txt"), ("there.txt", there)])
    assert kept_originals.read("kb", "missing.txt") is None and kept_originals.read("kb", "there.txt") == b"here"
    assert any("missing.txt" in r.getMessage() for r in caplog.records)


def test_an_invalid_collection_is_refused(kept_originals: KeptOriginals) -> None:
    with pytest.raises(ScopeError):
        kept_originals.keep("../outside", "a.md", b"x")
    with pytest.raises(ScopeError):
        kept_originals.read("../outside", "a.md")
    with pytest.raises(ScopeError):
        kept_originals.move("../outside", "a.md", "b.md")
    with pytest.raises(ScopeError):
        kept_originals.remove("../outside", "a.md")
