"""Documents out of input files: a JSONL file streams its BEIR records, any other document file is one document
whose text and structure come from `tools.extract`.

Text rules: a byte order mark is ignored (a file hashes the same with or without it); NUL characters and lone
surrogates are removed with a WARNING (`clean_text`); a document file in another encoding than UTF-8 is decoded as
`tools.extract.encoding` says (declared, then detected), and bytes that no encoding reads as text are refused naming
the file; JSON Lines is UTF-8 only (refused naming the file, line and byte offset).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tools.extract import MAX_FILE_BYTES, Extracted, ExtractError, Section, extract
from tools.extract.ocr import OcrOptions
from tools.ingest.documents import IngestError, SourceDocument, clean_text, clean_value
from tools.ingest.inputs import InputFile, name_error, plan_inputs
from tools.jsonl import JsonlError, read_records


@dataclass(frozen=True)
class FileDocument:
    """The one document of a document file, with what its extraction cost: `pages` (PDF pages, image frames),
    `extract_s` (seconds of wall time spent extracting), `ocr_pages` (of those pages, the ones read by OCR) and
    `ocr_s` (of that time, the seconds spent on OCR)."""

    document: SourceDocument | None
    pages: int
    extract_s: float
    ocr_pages: int = 0
    ocr_s: float = 0.0


def _cleaned(extracted: Extracted, where: str) -> tuple[str, tuple[Section, ...]]:
    """The text and sections with characters Postgres cannot store removed, section offsets kept in step."""
    if not extracted.sections:
        return clean_text(extracted.text, where), ()
    starts = [s.start for s in extracted.sections] + [len(extracted.text)]
    head = clean_text(extracted.text[: starts[0]], where)
    parts, sections, offset = [head], [], len(head)
    for section, end in zip(extracted.sections, starts[1:], strict=True):
        piece = clean_text(extracted.text[section.start : end], where)
        sections.append(Section(offset, section.page, section.path))
        parts.append(piece)
        offset += len(piece)
    return "".join(parts), tuple(sections)


def read_file_document(
    inp: InputFile, max_bytes: int = MAX_FILE_BYTES, ocr: OcrOptions | None = None
) -> FileDocument:
    """The document of a non-JSONL input (None when its text is blank); `ocr` says how pages without a text layer
    and images are read (`OcrOptions()` when None).

    Raises:
        IngestError: the file cannot be read or its text cannot be extracted (names the file and the cause).
    """
    if inp.doc_id is None:
        raise IngestError(f"{inp.path}: a JSONL corpus holds many documents; read it with read_documents")
    if (why := name_error(inp.path) or name_error(inp.doc_id)) is not None:
        raise IngestError(why)
    start = time.perf_counter()
    try:
        extracted = extract(inp.path, inp.kind, max_bytes, ocr)
    except ExtractError as exc:
        raise IngestError(str(exc)) from None
    except OSError as exc:
        raise IngestError(f"{inp.path}: cannot be read ({exc.strerror})") from exc
    elapsed = time.perf_counter() - start
    where = str(inp.path)
    text, sections = _cleaned(extracted, where)
    layout = extracted.layout if len(text) == len(extracted.text) else None  # characters removed: no longer aligned
    if not text.strip():
        return FileDocument(None, extracted.pages, elapsed, extracted.ocr_pages, extracted.ocr_s)
    structured = inp.structured
    metadata: dict[str, object] = {"format": inp.kind}
    if extracted.pages:
        metadata["pages"] = extracted.pages
    title = extracted.title
    if title == inp.path.stem:  # the extractor fell back to the file's name: the document's own (an upload's staged
        title = PurePosixPath(inp.doc_id).stem  # file is named 000001.txt; its doc id keeps the name it was sent as)
    document = SourceDocument(
        inp.doc_id,
        clean_text(title, where),
        text,
        where,
        metadata if structured else {},
        sections,
        title_in_text=structured,
        layout=layout,
    )
    return FileDocument(document, extracted.pages, elapsed, extracted.ocr_pages, extracted.ocr_s)


def read_documents(
    source: InputFile | Path, max_bytes: int = MAX_FILE_BYTES, ocr: OcrOptions | None = None
) -> Iterator[SourceDocument]:
    """Documents of one input, streamed (a JSONL file one line at a time).

    A bare `Path` is named as in `plan_inputs([path])`.

    Raises:
        IngestError: invalid UTF-8, invalid JSON, a JSONL record without `_id` / `text` (names the line), or a
            document file whose text cannot be extracted.
    """
    inp = source if isinstance(source, InputFile) else plan_inputs([source])[0]
    if inp.doc_id is not None:
        document = read_file_document(inp, max_bytes, ocr).document
        if document is not None:
            yield document
        return
    for _, doc in jsonl_documents(inp):
        yield doc


def jsonl_documents(inp: InputFile) -> Iterator[tuple[str, SourceDocument]]:
    """(`path:line`, document) for each record of the JSONL input `inp` (records with blank text and title are
    left out).

    Raises:
        IngestError: see `read_documents`.
    """
    path = inp.path
    try:
        for lineno, record in read_records(path):
            where = f"{path}:{lineno}"
            if "text" not in record:
                raise IngestError(f"{where}: expected a BEIR corpus record {{'_id', 'title', 'text'}}")
            doc_id = clean_text(str(record["_id"]), where)
            if not doc_id.strip():
                raise IngestError(f"{where}: empty '_id'; expected a non-blank document id")
            text = clean_text(str(record["text"]), where)
            title = clean_text(str(record.get("title") or ""), where)
            metadata = record.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise IngestError(f"{where}: 'metadata' is a {type(metadata).__name__}; expected an object")
            if text.strip() or title.strip():
                yield where, SourceDocument(inp.prefix + doc_id, title, text, str(path), clean_value(metadata, where))
    except JsonlError as exc:
        raise IngestError(f"{exc} (expected a BEIR corpus record {{'_id', 'title', 'text'}})") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot be read ({exc.strerror})") from exc


def scan_inputs(inputs: list[InputFile]) -> int:
    """Check the inputs without storing anything: every JSONL line is read and validated, every other document
    file counts as one document (its extraction happens once, when it is ingested). Returns the number of
    documents.

    Raises:
        IngestError: a malformed JSONL input (see `read_documents`), or one document id twice in the run (names
            both places).
    """
    first_seen: dict[str, str] = {}
    for inp in inputs:
        if not inp.supported:
            continue
        if inp.doc_id is None:
            located: Iterator[tuple[str, str]] = ((where, doc.doc_id) for where, doc in jsonl_documents(inp))
        else:
            located = iter([(str(inp.path), inp.doc_id)])
        for where, doc_id in located:
            other = first_seen.setdefault(doc_id, where)
            if other != where:
                raise IngestError(
                    f"document id {doc_id!r} appears at {other} and at {where}; expected unique ids in one run"
                )
    return len(first_seen)
