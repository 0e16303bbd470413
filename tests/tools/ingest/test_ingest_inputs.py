"""Ingestion inputs without any server: document ids, duplicate ids, BOM, NUL, invalid UTF-8, malformed lines."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tools.ingest import IngestError, plan_inputs, read_documents, scan_inputs
from tools.jsonl import JsonlError, read_records

BOM = b"\xef\xbb\xbf"


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def docs_of(paths: list[Path], root: Path | None = None, prefix: str = "") -> list[tuple[str, str]]:
    return [(d.doc_id, d.title) for inp in plan_inputs(paths, root, prefix) for d in read_documents(inp)]


def test_same_file_name_in_two_folders_gets_two_ids(tmp_path: Path) -> None:
    a = write(tmp_path / "a" / "handbook.md", b"# Handbook A\nfirst")
    b = write(tmp_path / "b" / "handbook.md", b"# Handbook B\nsecond")
    assert docs_of([a, b], root=tmp_path) == [("a/handbook.md", "Handbook A"), ("b/handbook.md", "Handbook B")]
    # the default root is the inputs' common parent when they lie outside the working directory
    assert docs_of([a, b]) == docs_of([a, b], root=tmp_path)
    assert docs_of([a], root=tmp_path, prefix="team/") == [("team/a/handbook.md", "Handbook A")]


def test_ids_are_stable_under_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = write(tmp_path / "docs" / "a.txt", b"alpha")
    b = write(tmp_path / "docs" / "sub" / "b.txt", b"beta")
    monkeypatch.chdir(tmp_path)
    # inputs under the cwd are named relative to it, whichever subset is ingested
    assert docs_of([a]) == [("docs/a.txt", "a")]
    assert docs_of([a, b]) == [("docs/a.txt", "a"), ("docs/sub/b.txt", "b")]


def test_jsonl_keeps_its_ids_with_an_optional_prefix(tmp_path: Path) -> None:
    corpus = write(tmp_path / "c.jsonl", b'{"_id": "7", "title": "T", "text": "x"}\n')
    assert docs_of([corpus]) == [("7", "T")]
    assert docs_of([corpus], prefix="scifact:") == [("scifact:7", "T")]


def test_two_inputs_with_one_id_are_refused_naming_both(tmp_path: Path) -> None:
    one = write(tmp_path / "one.jsonl", b'{"_id": "d1", "text": "a"}\n')
    two = write(tmp_path / "two.jsonl", b'{"_id": "x", "text": "b"}\n{"_id": "d1", "text": "c"}\n')
    with pytest.raises(IngestError, match=r"'d1'.*one\.jsonl:1.*two\.jsonl:2"):
        scan_inputs(plan_inputs([one, two]))
    same = write(tmp_path / "dup.jsonl", b'{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n')
    with pytest.raises(IngestError, match=r"dup\.jsonl:1.*dup\.jsonl:2"):
        scan_inputs(plan_inputs([same]))
    with pytest.raises(IngestError, match="given twice"):
        plan_inputs([one, tmp_path / "." / "one.jsonl"])


def test_bom_is_ignored_and_hashes_like_no_bom(tmp_path: Path) -> None:
    for suffix in (".md", ".txt"):
        plain = next(read_documents(write(tmp_path / "plain" / f"doc{suffix}", b"# Title\nbody text")))
        bom = next(read_documents(write(tmp_path / "bom" / f"doc{suffix}", BOM + b"# Title\nbody text")))
        assert bom.content == plain.content and bom.content_hash == plain.content_hash
    record = b'{"_id": "1", "title": "t", "text": "body"}\n'
    plain_j = next(read_documents(write(tmp_path / "plain.jsonl", record)))
    bom_j = next(read_documents(write(tmp_path / "bom.jsonl", BOM + record)))
    assert (bom_j.doc_id, bom_j.content_hash) == (plain_j.doc_id, plain_j.content_hash)


def test_nul_and_lone_surrogates_are_stripped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text_file = write(tmp_path / "nul.txt", b"before\x00after")
    record = {"_id": "n1", "title": "t\u0000", "text": "a\u0000b \ud800c", "metadata": {"k": "v\u0000"}}
    corpus = write(tmp_path / "nul.jsonl", b'{"_id": "ok", "text": "fine"}\n' + json.dumps(record).encode() + b"\n")
    with caplog.at_level(logging.WARNING, logger="tools.ingest"):
        (doc,) = read_documents(text_file)
        docs = list(read_documents(corpus))
    assert doc.text == "beforeafter"
    assert (docs[1].title, docs[1].text, docs[1].metadata) == ("t", "ab c", {"k": "v"})
    messages = [r.getMessage() for r in caplog.records]
    assert any("nul.txt" in m and "NUL" in m for m in messages)
    assert any("nul.jsonl:2" in m for m in messages)


def test_invalid_utf8_in_jsonl_is_refused_naming_file_and_byte_offset(tmp_path: Path) -> None:
    text_file = write(tmp_path / "latin1.txt", "café au lait, crème brûlée".encode("latin-1"))
    (doc,) = read_documents(text_file)  # a text file in a legacy encoding is decoded (tools.extract.encoding)
    assert doc.text == "café au lait, crème brûlée"
    first = b'{"_id": "1", "text": "ok"}\n'
    corpus = write(tmp_path / "bad.jsonl", BOM + first + b'{"_id": "2", "text": "caf\xe9"}\n')
    offset = len(BOM) + len(first) + len(b'{"_id": "2", "text": "caf')
    with pytest.raises(IngestError, match=rf"bad\.jsonl:2: not valid UTF-8 at byte {offset} "):
        scan_inputs(plan_inputs([corpus]))
    with pytest.raises(JsonlError, match=rf"at byte {offset} "):
        list(read_records(corpus))


def test_malformed_line_is_named_and_the_scan_refuses_before_anything_is_read_further(tmp_path: Path) -> None:
    corpus = write(tmp_path / "half.jsonl", b'{"_id": "1", "text": "ok"}\n{not json\n')
    with pytest.raises(IngestError, match=r"half\.jsonl:2: invalid JSON"):
        scan_inputs(plan_inputs([corpus]))
    no_text = write(tmp_path / "notext.jsonl", b'{"_id": "1", "title": "only"}\n')
    with pytest.raises(IngestError, match=r"notext\.jsonl:1: expected a BEIR corpus record"):
        scan_inputs(plan_inputs([no_text]))
    with pytest.raises(IngestError, match=r"missing\.md: no such file"):
        plan_inputs([tmp_path / "missing.md"])
