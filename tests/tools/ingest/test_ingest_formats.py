"""Document files without any server: type sniffing, text and structure of real PDF, HTML, DOCX and Markdown files,
chunks kept to their page or section, and a clear per-file error for each kind of bad file."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from tests.document_files import GUIDE_HTML, empty_pdf, encrypted_pdf, guide_docx, print_pdf, zip_named
from tools.extract import ExtractError, Section, extract, sniff, sniff_bytes
from tools.ingest import plan_inputs, read_documents
from tools.ingest.embedding import located_chunks
from tools.ingest.inputs import InputFile
from tools.ingest.readers import read_file_document
from tools.tokenizer import load_tokenizer

LIMIT = 10 * 1024 * 1024


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("documents")
    print_pdf(GUIDE_HTML, folder / "guide.pdf")
    (folder / "guide.html").write_text(GUIDE_HTML, encoding="utf-8")
    guide_docx(folder / "guide.docx")
    return folder


def test_types_are_sniffed_from_content_not_the_name(files: Path, tmp_path: Path) -> None:
    disguised = tmp_path / "report.txt"
    disguised.write_bytes((files / "guide.pdf").read_bytes())
    page = tmp_path / "page.dat"
    page.write_text("  <!DOCTYPE html><html><body><p>hi</p></body></html>")
    word = tmp_path / "word.bin"
    word.write_bytes((files / "guide.docx").read_bytes())
    beir = tmp_path / "corpus.txt"
    beir.write_text('{"_id": "1", "title": "t", "text": "x"}\n')
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nplain")
    image = tmp_path / "photo.dat"
    image.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF" + bytes(range(256)) * 8)
    gif = tmp_path / "anim.png"
    gif.write_bytes(b"GIF89a" + bytes(range(256)) * 8)
    assert [sniff(p) for p in (disguised, page, word, beir, notes, image, gif)] == [
        "pdf",
        "html",
        "docx",
        "jsonl",
        "markdown",
        "image",
        "unsupported",
    ]
    assert sniff(zip_named(tmp_path / "really.pdf")) == "zip"
    (tmp_path / "none.pdf").write_bytes(b"")
    assert sniff(tmp_path / "none.pdf") == "empty"


def test_pdf_text_layer_page_by_page(files: Path) -> None:
    got = extract(files / "guide.pdf", "pdf", LIMIT)
    assert got.pages == 2 and got.title == "Handbook"
    assert [s.page for s in got.sections] == [1, 2]
    page_1 = got.text[got.sections[0].start : got.sections[1].start]
    page_2 = got.text[got.sections[1].start :]
    assert "zebrafish" in page_1 and "quokka" not in page_1
    assert "quokka" in page_2 and "administrator account" in page_2


def test_html_main_content_without_boilerplate_and_with_heading_paths(files: Path) -> None:
    got = extract(files / "guide.html", "html", LIMIT)
    assert "zebrafish" in got.text and "quokka" in got.text
    for boilerplate in ("About us", "Cookie settings", "Copyright"):
        assert boilerplate not in got.text
    paths = {s.path for s in got.sections}
    assert ("Guide", "Install", "Linux") in paths and ("Guide", "Install", "Windows") in paths
    linux = next(s for s in got.sections if s.path[-1:] == ("Linux",))
    assert got.text[linux.start :].startswith("Linux")


def test_docx_headings_paragraphs_and_tables(files: Path) -> None:
    got = extract(files / "guide.docx", "docx", LIMIT)
    assert got.title == "Guide"
    assert "Distribution | Command\nDebian | apt" in got.text
    by_path = {s.path: s.start for s in got.sections}
    assert list(by_path) == [
        ("Guide",),
        ("Guide", "Install"),
        ("Guide", "Install", "Linux"),
        ("Guide", "Install", "Windows"),
    ]
    linux_part = got.text[by_path[("Guide", "Install", "Linux")] : by_path[("Guide", "Install", "Windows")]]
    assert "zebrafish" in linux_part and "Debian | apt" in linux_part and "quokka" not in linux_part


def test_markdown_sections_ignore_hashes_in_code(tmp_path: Path) -> None:
    md = tmp_path / "m.md"
    md.write_text(
        "Intro line.\n\n# Guide\n\ntext\n\n```sh\n# not a heading\n```\n\n## Install\n\nmore\n\nSetext\n======\n\nx"
    )
    got = extract(md, "markdown", LIMIT)
    assert [s.path for s in got.sections] == [(), ("Guide",), ("Guide", "Install"), ("Setext",)]
    assert got.text[got.sections[2].start :].startswith("## Install")


def test_a_heading_with_no_body_joins_the_next_section_so_no_chunk_is_a_heading_alone(tmp_path: Path) -> None:
    md = tmp_path / "handbook.md"
    md.write_text("# Quokka Handbook\n\n## Installation\n\nRun the installer on Linux.\n\n## Usage\n\nStart it.")
    doc = next(iter(read_documents(plan_inputs([md], root=tmp_path)[0])))
    chunks = located_chunks(doc, load_tokenizer("all-minilm-l6-v2"), 200, 40)
    assert [loc["section"] for _, loc in chunks] == [["Quokka Handbook", "Installation"], ["Quokka Handbook", "Usage"]]
    assert "Run the installer" in chunks[0][0].text and "## Installation" in chunks[0][0].text
    assert all(len(c.text.split()) > 3 for c, _ in chunks)


def test_chunks_never_cross_a_page_and_carry_it(files: Path) -> None:
    doc = next(iter(read_documents(plan_inputs([files / "guide.pdf"], root=files)[0])))
    assert doc.doc_id == "guide.pdf" and doc.metadata == {"format": "pdf", "pages": 2}
    chunks = located_chunks(doc, load_tokenizer("all-minilm-l6-v2"), 200, 40)
    assert [loc["page"] for _, loc in chunks] == [1, 2]
    assert [loc["span"] for _, loc in chunks] == [[c.start, c.end] for c, _ in chunks]
    assert all({box[0] for box in cast(list[list[float]], loc["boxes"])} == {loc["page"]} for _, loc in chunks)
    assert "zebrafish" in chunks[0][0].text and "quokka" in chunks[1][0].text
    assert [c.index for c, _ in chunks] == [0, 1]


def test_chunks_of_a_long_section_keep_its_path_within_the_window(tmp_path: Path) -> None:
    body = " ".join(f"Sentence number {i} about installing the service." for i in range(120))
    md = tmp_path / "long.md"
    md.write_text(f"# Guide\n\nShort intro.\n\n## Install\n\n{body}\n\n## Use\n\nRun it.")
    doc = next(iter(read_documents(plan_inputs([md], root=tmp_path)[0])))
    chunks = located_chunks(doc, load_tokenizer("all-minilm-l6-v2"), 64, 8)
    sections = [loc["section"] for _, loc in chunks]
    assert sections[0] == ["Guide"] and sections[-1] == ["Guide", "Use"]
    install = [c for c, loc in chunks if loc["section"] == ["Guide", "Install"]]
    assert len(install) > 5 and all(c.token_count <= 64 for c in install)
    assert all(doc.content[c.start : c.end] == c.text for c, _ in chunks)
    assert all(loc["span"] == [c.start, c.end] and "boxes" not in loc for c, loc in chunks)  # no layout in Markdown


def test_a_pdf_without_text_even_by_ocr_is_refused(tmp_path: Path) -> None:
    scan = print_pdf(
        '<html><body><svg width="400" height="300"><rect width="400" height="300"/></svg></body></html>',
        tmp_path / "scan.pdf",
    )
    with pytest.raises(ExtractError, match=r"scan\.pdf: no text on any of its 1 page\(s\): no text layer, and OCR"):
        extract(scan, "pdf", LIMIT)


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("encrypted.pdf", "encrypted"),
        ("empty.pdf", "no pages"),
        ("truncated.pdf", "not a readable PDF"),
        ("scripts.html", "no readable main content"),
        ("zero.txt", "empty"),
        ("archive.pdf", "a ZIP archive, not a document"),
        ("big.md", "over the limit of 1000 bytes"),
        ("broken.docx", "not a readable DOCX"),
    ],
)
def test_bad_file_gets_an_error_naming_it_and_the_cause(files: Path, tmp_path: Path, name: str, cause: str) -> None:
    path = tmp_path / name
    if name == "encrypted.pdf":
        encrypted_pdf(files / "guide.pdf", path)
    elif name == "empty.pdf":
        empty_pdf(path)
    elif name == "truncated.pdf":
        path.write_bytes((files / "guide.pdf").read_bytes()[:2000])
    elif name == "scripts.html":
        path.write_text("<html><head><script>var a = 1;</script></head><body><script>render()</script></body></html>")
    elif name == "zero.txt":
        path.write_bytes(b"")
    elif name == "archive.pdf":
        zip_named(path)
    elif name == "big.md":
        path.write_text("# Big\n\n" + "word " * 400)
    elif name == "broken.docx":
        data = (files / "guide.docx").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    limit = 1000 if name == "big.md" else LIMIT
    with pytest.raises(ExtractError, match=name.replace(".", r"\.")) as error:
        extract(path, sniff(path), limit)
    assert cause in str(error.value)


def test_section_location_is_the_chunk_metadata() -> None:
    assert Section(0, page=12).location() == {"page": 12}
    assert Section(0, path=("Guide", "Install")).location() == {"section": ["Guide", "Install"]}
    assert Section(0).location() == {}


def test_citation_shows_the_page_or_the_section_path() -> None:
    from agent.core.results import Citation, location_fields

    pdf = Citation(
        doc_id="docs/handbook.pdf",
        chunk_id="docs/handbook.pdf#3",
        score=0.5,
        passage=1,
        **location_fields({"page": 12}),
    )
    html = Citation(
        doc_id="guide.html",
        chunk_id="guide.html#0",
        score=0.5,
        passage=2,
        **location_fields({"section": ["Guide", "Install", "Linux"]}),
    )
    plain = Citation(doc_id="4983", chunk_id="4983#0", score=0.5, passage=3, **location_fields({}))
    assert (pdf.page, pdf.location) == (12, "handbook.pdf p. 12")
    assert (html.section, html.location) == (["Guide", "Install", "Linux"], "Guide › Install › Linux")
    assert (plain.page, plain.section, plain.location) == (None, [], "")
    assert pdf.model_dump()["location"] == "handbook.pdf p. 12"


LEGACY_PAGE = (
    '<!DOCTYPE html>\n<html><head><meta charset="windows-1252"><title>Café prices</title></head>\n'
    "<body><article><h1>Café prices</h1><p>The café sells “espresso” for 2 € and crème brûlée for 5 €; "
    "the naïve visitor pays the same as the regulars, and the terrace is open from May to September.</p>"
    "<p>Opening hours are posted at the door, and the staff speak français, Deutsch and español.</p>"
    "</article></body></html>"
)
"""A web page in windows-1252, as its `<meta charset>` declares."""


def test_a_legacy_encoded_page_is_read_by_its_declared_charset_from_folders_and_uploads(tmp_path: Path) -> None:
    data = LEGACY_PAGE.encode("cp1252")
    page = tmp_path / "cafe.html"
    page.write_bytes(data)
    assert sniff(page) == "html" and sniff_bytes(data, "cafe.html") == "html"
    got = extract(page, "html", LIMIT)
    assert got.title == "Café prices"
    assert "“espresso” for 2 € and crème brûlée" in got.text and "français" in got.text
    (doc,) = read_documents(page)  # the folder path: sniffed, then read
    assert "crème brûlée" in doc.text


def test_html_encodings_follow_the_whatwg_order_bom_then_meta_then_detection(tmp_path: Path) -> None:
    undeclared = LEGACY_PAGE.replace('<meta charset="windows-1252">', "")
    pages = {
        "bom16.html": b"\xff\xfe" + LEGACY_PAGE.encode("utf-16-le"),  # the BOM wins over the meta
        "latin1-label.html": LEGACY_PAGE.replace("windows-1252", "iso-8859-1").encode("cp1252"),  # = windows-1252
        "undeclared.html": undeclared.encode("cp1252"),  # detected
        "utf8.html": undeclared.encode("utf-8"),
    }
    for name, data in pages.items():
        (tmp_path / name).write_bytes(data)
        assert sniff(tmp_path / name) == "html", name
        assert "crème brûlée for 5 €" in extract(tmp_path / name, "html", LIMIT).text, name


def test_a_latin1_page_that_declares_utf8_is_read_as_detected_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    page = tmp_path / "menu.html"
    declared_utf8 = LEGACY_PAGE.replace("windows-1252", "utf-8").replace("“", '"').replace("”", '"')
    page.write_bytes(declared_utf8.replace(" €", " EUR").encode("latin-1"))  # as a misconfigured server saves it
    with caplog.at_level("WARNING", logger="tools.extract"):
        (doc,) = read_documents(page)
    assert "café" in doc.text and "crème brûlée for 5 EUR" in doc.text and doc.title == "Café prices"
    assert "\ufffd" not in doc.text and "\ufffd" not in doc.title
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert str(page) in warning and "utf-8" in warning and "cp1252" in warning, warning


def test_legacy_encoded_text_files_are_decoded_and_binary_ones_still_refused(tmp_path: Path) -> None:
    texts = {
        "notes.txt": ("Le café était très agréable, merci à l'équipe.", "cp1252"),
        "privet.txt": ("Привет, как дела? Это тест кодировки текста.", "cp1251"),
        "nihongo.md": ("# 日本語\n\n日本語のテキストです。文字コードの検出。", "shift_jis"),
    }
    for name, (text, encoding) in texts.items():
        path = tmp_path / name
        path.write_bytes(text.encode(encoding))
        assert sniff(path) in ("text", "markdown"), name
        assert extract(path, sniff(path), LIMIT).text == text, name
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes(b"\xff\xfe" + "naïve “text”".encode("utf-16-le"))
    assert sniff(utf16) == "text" and extract(utf16, "text", LIMIT).text == "naïve “text”"
    noise = tmp_path / "noise.txt"
    noise.write_bytes(bytes(range(256)) * 16)
    assert sniff(tmp_path / "noise.txt") == "text"  # named as text: its reader says why it is not
    with pytest.raises(ExtractError, match=r"noise\.txt: not text"):
        extract(noise, "text", LIMIT)
    blob = tmp_path / "blob.dat"
    blob.write_bytes(bytes(range(256)) * 16)
    assert sniff(blob) == "unsupported"


@pytest.mark.parametrize(
    ("doc_id", "body", "title"),
    [("notes/readme.txt", "The okapi gateway listens on port 8080.", "readme"), ("plan.md", "No heading.", "plan")],
)
def test_an_uploaded_file_is_titled_by_its_name_not_its_staged_file_s(
    tmp_path: Path, doc_id: str, body: str, title: str
) -> None:
    staged = tmp_path / ("000001" + Path(doc_id).suffix)  # how the upload worker stages each file (tools.jobs.worker)
    staged.write_text(body)
    document = read_file_document(InputFile(staged, doc_id, kind=sniff(staged))).document
    assert document is not None and document.title == title
