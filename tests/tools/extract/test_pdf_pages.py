"""PDFs as people make them, extracted by `tools.extract.pdf`: pages rotated with `/Rotate` (a landscape page whose
text runs up the portrait sheet), pages cropped with a `CropBox` (the text outside it is not on the page any more),
typographic ligatures (ﬁ ﬂ ﬀ) and fonts embedded as CID fonts (Type0, Identity-H: how Chromium embeds every font),
Greek and Cyrillic included. The files are printed by headless Chromium (`tests/document_files.py`) and rotated or
cropped with pypdf.

PDFium runs in a separate worker process (`PdfExtractor`): a worker that dies on a file (a PDFium crash, played by
`tests/pdf_crash.py`) fails that file with an error naming it, and the next file is extracted by a new worker, with
the calling process alive."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import numpy as np
import pypdf
import pytest
from pypdf.generic import RectangleObject

from tests.document_files import TABLE_HTML, print_pdf, turned_pdf
from tests.pdf_crash import crash_on_marker
from tools.extract import ExtractError
from tools.extract.pdf import PdfExtractor, extract_pdf
from tools.ingest.documents import IngestError
from tools.ingest.inputs import plan_inputs
from tools.ingest.readers import read_file_document

LIGATURES = re.compile("[\ufb00-\ufb06]")

PAGES_HTML = """<!doctype html><html><head><style>
body { font-family: "DejaVu Serif"; font-size: 14pt; font-variant-ligatures: common-ligatures; }
</style></head><body>
<p>The official filing flow affirms efficient office workflows.</p>
<p>Greek: Καλημέρα κόσμε. Cyrillic: Привет мир.</p>
<div style="break-before: page"></div>
<p>HIDDEN header about zebrafish printers.</p>
<div style="height: 130mm"></div>
<p>Visible paragraph about wombats and their burrows.</p>
<div style="break-before: page"></div>
<div style="transform: rotate(-90deg); transform-origin: top left; position: absolute; top: 760mm; left: 20mm;
            width: 200mm">
<p>Landscape table line one about quokkas on islands.</p>
<p>Landscape line two about numbats eating termites.</p>
</div>
</body></html>
"""
"""Three printed pages: ligatures and non-Latin text; a header (`HIDDEN`) far above the paragraph that a crop keeps;
a landscape block whose lines run up the page (the page is then given `/Rotate 90`, as landscape pages are)."""


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pdf_pages")
    printed = print_pdf(PAGES_HTML, folder / "printed.pdf")
    out: dict[str, Path] = {}
    for name, index in {"ligatures": 0, "cropped": 1, "rotated": 2}.items():
        writer = pypdf.PdfWriter(clone_from=str(printed))
        for drop in sorted((i for i in range(len(writer.pages)) if i != index), reverse=True):
            writer.remove_page(drop)
        page = writer.pages[0]
        if name == "cropped":
            page.cropbox = RectangleObject([0, 0, float(page.mediabox.width), 420])  # the lower half of the sheet
        if name == "rotated":
            page.rotate(90)
        out[name] = folder / f"{name}.pdf"
        writer.write(str(out[name]))
    return out


def test_ligatures_come_out_as_letters_from_cid_fonts(pages: dict[str, Path]) -> None:
    reader = pypdf.PdfReader(pages["ligatures"])
    resources = reader.pages[0]["/Resources"].get_object()
    assert isinstance(resources, pypdf.generic.DictionaryObject)
    font_dict = resources["/Font"].get_object()
    assert isinstance(font_dict, pypdf.generic.DictionaryObject)
    fonts = [f.get_object() for f in font_dict.values()]
    assert fonts and all(f["/Subtype"] == "/Type0" for f in fonts)  # CID-keyed fonts
    assert {d.get_object()["/Subtype"] for f in fonts for d in f["/DescendantFonts"]} == {"/CIDFontType2"}
    assert LIGATURES.search(reader.pages[0].extract_text())  # the file does hold ligature glyphs
    text = extract_pdf(pages["ligatures"]).text
    assert "The official filing flow affirms efficient office workflows." in text
    assert "Greek: Καλημέρα κόσμε. Cyrillic: Привет мир." in text
    assert not LIGATURES.search(text)


def test_text_outside_the_crop_box_is_not_on_the_page(pages: dict[str, Path]) -> None:
    extracted = extract_pdf(pages["cropped"])
    assert "Visible paragraph about wombats and their burrows." in extracted.text
    assert "HIDDEN" not in extracted.text and "zebrafish" not in extracted.text


def test_a_rotated_landscape_page_reads_line_by_line(pages: dict[str, Path]) -> None:
    assert pypdf.PdfReader(pages["rotated"]).pages[0].rotation == 90
    text = extract_pdf(pages["rotated"]).text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines == [
        "Landscape table line one about quokkas on islands.",
        "Landscape line two about numbats eating termites.",
    ]


def test_a_worker_that_dies_fails_its_file_and_the_next_file_is_extracted(
    pages: dict[str, Path], tmp_path: Path
) -> None:
    crash = tmp_path / "crash-me.pdf"
    crash.write_bytes(pages["ligatures"].read_bytes())
    extractor = PdfExtractor(target=crash_on_marker)
    try:
        assert "official" in extractor.extract(pages["ligatures"]).text
        first_worker = extractor.worker_pids()
        with pytest.raises(ExtractError, match=r"crash-me\.pdf: the PDF reader's worker process died") as caught:
            extractor.extract(crash)
        assert "not retried" in str(caught.value)
        after = extractor.extract(pages["cropped"])  # a new worker
        assert "wombats" in after.text and extractor.worker_pids().isdisjoint(first_worker)
    finally:
        extractor.close()
    assert os.getpid() > 0  # this process (the server, in production) is alive and went on


def test_a_worker_ignores_sigint_and_goes_on_with_the_next_file(pages: dict[str, Path]) -> None:
    """Ctrl+C of `rag serve` reaches its whole process group: the PDF worker neither dies nor prints a traceback;
    the server stops it when it shuts down."""
    extractor = PdfExtractor()
    try:
        assert "official" in extractor.extract(pages["ligatures"]).text
        (worker,) = extractor.worker_pids()
        os.kill(worker, signal.SIGINT)
        assert "wombats" in extractor.extract(pages["cropped"]).text
        assert extractor.worker_pids() == {worker}
    finally:
        extractor.close()


def test_ingest_reports_a_crashed_pdf_as_that_file_failing(
    pages: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tools.extract.pdf as pdf

    extractor = PdfExtractor(target=crash_on_marker)
    monkeypatch.setattr(pdf, "EXTRACTOR", extractor)
    crash = tmp_path / "crash-report.pdf"
    crash.write_bytes(pages["ligatures"].read_bytes())
    try:
        with pytest.raises(IngestError, match=r"crash-report\.pdf"):
            read_file_document(plan_inputs([crash])[0])
        read = read_file_document(plan_inputs([pages["ligatures"]])[0])
        assert read.document is not None and "office workflows" in read.document.text
    finally:
        extractor.close()


def _old_text(path: Path) -> str:
    """The text as `extract_here` made it before it carried boxes: `_clean` of each page's `get_text_range()` (or
    `get_text_bounded` in a crop box), pages joined by a blank line."""
    import pypdfium2 as pdfium

    from tools.extract import pdf

    document = pdfium.PdfDocument(path)
    try:
        texts = []
        for index in range(len(document)):
            page = document[index]
            textpage = page.get_textpage()
            crop = pdf._crop(page)
            raw = textpage.get_text_range() if crop is None else textpage.get_text_bounded(*crop)
            texts.append(pdf._clean(raw))
    finally:
        document.close()
    return "\n\n".join(t for t in texts if t)


@pytest.mark.parametrize("name", ["ligatures", "cropped"])
def test_text_with_boxes_is_the_text_without_them(pages: dict[str, Path], name: str) -> None:
    extracted = extract_pdf(pages[name])
    assert extracted.text == _old_text(pages[name])
    layout = extracted.layout
    assert layout is not None
    assert layout.pages.shape == (len(extracted.text),) and layout.boxes.shape == (len(extracted.text), 4)
    letters = [i for i, ch in enumerate(extracted.text) if not ch.isspace()]
    assert (layout.pages[letters] == 1).all() and not np.isnan(layout.boxes[letters]).any()
    assert np.isnan(layout.boxes[layout.pages == 0]).all()


def test_the_whole_printed_file_keeps_its_text_and_joins_pages_without_boxes(pages: dict[str, Path]) -> None:
    printed = pages["ligatures"].parent / "printed.pdf"
    extracted = extract_pdf(printed)
    assert extracted.layout is not None
    for section in extracted.sections[1:]:  # the blank line before each page after the first
        assert extracted.text[section.start - 2 : section.start] == "\n\n"
        assert (extracted.layout.pages[section.start - 2 : section.start] == 0).all()


def test_boxes_run_left_to_right_along_a_line(pages: dict[str, Path]) -> None:
    extracted = extract_pdf(pages["ligatures"])
    assert extracted.layout is not None
    at = extracted.text.index("official")
    boxes = extracted.layout.boxes[at : at + len("official")]
    assert (np.diff(boxes[:, 0]) >= 0).all()  # left edges in reading order
    assert boxes[:, 1].max() < boxes[:, 3].min()  # one line: every box overlaps every other vertically


def test_cropped_page_boxes_lie_inside_the_crop_box(pages: dict[str, Path]) -> None:
    extracted = extract_pdf(pages["cropped"])
    assert extracted.layout is not None
    known = extracted.layout.boxes[extracted.layout.pages > 0]
    assert len(known) and (known[:, 3] <= 420 + 1).all()  # the crop box's top


def test_a_rotated_landscape_page_has_boxes_on_the_page_as_shown(pages: dict[str, Path]) -> None:
    extracted = extract_pdf(pages["rotated"])
    assert extracted.layout is not None and extracted.layout.page_sizes == ((792.0, 612.0),)  # landscape, as shown
    at = extracted.text.index("quokkas")
    boxes = extracted.layout.boxes[at : at + len("quokkas")]
    assert (np.diff(boxes[:, 0]) > 0).all()  # left to right as shown, on one line
    assert boxes[:, 1].max() < boxes[:, 3].min()
    assert (boxes[:, [0, 2]] >= 0).all() and (boxes[:, [0, 2]] <= 792).all()
    assert (boxes[:, [1, 3]] >= 0).all() and (boxes[:, [1, 3]] <= 612).all()


MIXED_HTML = """<!doctype html><html><body style="font-family: 'DejaVu Serif'; font-size: 14pt">
<p>An upright heading about pelicans.</p>
<div style="transform: rotate(-90deg); transform-origin: top left; position: absolute; top: 200mm; left: 20mm">
<p>A block turned up the sheet about herons.</p></div>
</body></html>
"""


def test_a_page_with_text_turned_two_ways_is_read_by_pypdf_without_boxes(tmp_path: Path) -> None:
    extracted = extract_pdf(print_pdf(MIXED_HTML, tmp_path / "mixed.pdf"))
    assert "An upright heading about pelicans." in extracted.text
    assert "A block turned up the sheet about herons." in extracted.text
    assert extracted.layout is None


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return print_pdf(TABLE_HTML, tmp_path_factory.mktemp("turned") / "table.pdf")


TURNS = [(rotate, upright) for rotate in (90, 180, 270) for upright in (True, False)]
"""`/Rotate` and whether the page is shown upright (its content turned the other way) or turned."""


def _turn_box(box: np.ndarray, rotate: int, size: tuple[float, float]) -> np.ndarray:
    """`box` (left, bottom, right, top) on an upright `size` page, where it is shown after a `rotate` turn clockwise."""
    width, height = size
    x, y = box[[0, 2]], box[[1, 3]]
    turned = {90: (y, width - x), 180: (width - x, height - y), 270: (height - y, x)}[rotate]
    return np.array([turned[0].min(), turned[1].min(), turned[0].max(), turned[1].max()])


@pytest.mark.parametrize(("rotate", "upright"), TURNS)
def test_a_turned_page_reads_in_lines_and_cells_as_the_upright_page(
    table: Path, tmp_path: Path, rotate: int, upright: bool
) -> None:
    """Lines top to bottom as shown, a table's cells apart, for every `/Rotate`, whether the page is shown upright
    (its text stored turned the other way) or turned (the text upright on the sheet)."""
    plain = extract_pdf(table)
    assert "quokkas on islands.\nSecond line about numbats eating termites.\nvitamin D 112 pelican\niron 87 heron" in (
        plain.text
    )
    turned = extract_pdf(turned_pdf(table, tmp_path / "turned.pdf", rotate, upright=upright))
    assert turned.text == plain.text


@pytest.mark.parametrize(("rotate", "upright"), TURNS)
def test_a_turned_page_s_boxes_are_where_its_characters_are_shown(
    table: Path, tmp_path: Path, rotate: int, upright: bool
) -> None:
    plain = extract_pdf(table)
    turned = extract_pdf(turned_pdf(table, tmp_path / "turned.pdf", rotate, upright=upright))
    assert plain.layout is not None and turned.layout is not None
    assert (turned.layout.pages == plain.layout.pages).all()
    size = plain.layout.page_sizes[0]
    shown = size if upright or rotate == 180 else size[::-1]
    assert turned.layout.page_sizes == (shown,)
    placed = plain.layout.pages > 0
    want = plain.layout.boxes[placed]
    if not upright:
        want = np.array([_turn_box(box, rotate, size) for box in want])
    assert turned.layout.boxes[placed] == pytest.approx(want, abs=0.05)


@pytest.mark.parametrize(("rotate", "upright"), TURNS)
def test_a_cropped_turned_page_keeps_the_text_of_its_crop_box(
    table: Path, tmp_path: Path, rotate: int, upright: bool
) -> None:
    writer = pypdf.PdfWriter(clone_from=str(table))
    writer.pages[0].cropbox = RectangleObject([0, 700, 400, 792])  # the first two lines, cut on the right
    cropped = tmp_path / "cropped.pdf"
    writer.write(str(cropped))
    plain = extract_pdf(cropped)
    assert (
        plain.text
        == "Nutrients per serving, first line about quokkas on is\nSecond line about numbats eating termites."
    )
    turned_file = turned_pdf(cropped, tmp_path / "turned.pdf", rotate, upright=upright)
    turned = extract_pdf(turned_file)
    assert turned.text == plain.text
    assert plain.layout is not None and turned.layout is not None
    if upright:  # where the crop box's corner is shown, less that corner: where the upright page shows them
        corner = np.array([*pypdf.PdfReader(turned_file).pages[0].cropbox.lower_left] * 2, np.float32)
        want = plain.layout.boxes - np.array([0, 700, 0, 700], np.float32)
        assert turned.layout.boxes - corner == pytest.approx(want, abs=0.05, nan_ok=True)
    else:
        corner = np.array([0, 700, 0, 700], np.float32)  # the crop box's corner stays where it is, the box turns
        placed = plain.layout.pages > 0
        want = np.array([_turn_box(box, rotate, (400, 92)) for box in plain.layout.boxes[placed] - corner]) + corner
        assert turned.layout.boxes[placed] == pytest.approx(want, abs=0.05)
