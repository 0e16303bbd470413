"""DOCX text as Word shows it with tracked changes accepted (tools/extract/docx.py): nested tables, content controls,
tracked insertions and deletions, merged cells read once. Documents built with python-docx, the WordprocessingML
python-docx cannot write (revisions, content controls) added as XML. No server."""

from __future__ import annotations

from pathlib import Path

import docx
from docx.oxml import parse_xml

from tests.document_files import guide_docx
from tools.extract.docx import extract_docx

W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def _save(document: docx.document.Document, tmp_path: Path) -> Path:
    path = tmp_path / "doc.docx"
    document.save(str(path))
    return path


def test_a_nested_table_is_read_inside_its_cell(tmp_path: Path) -> None:
    document = docx.Document()
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Outer"
    inner = table.cell(0, 1).add_table(rows=2, cols=1)
    inner.cell(0, 0).text = "pelican dosage"
    inner.cell(1, 0).text = "twice daily"
    text = extract_docx(_save(document, tmp_path)).text
    assert "pelican dosage" in text and "twice daily" in text
    assert text.splitlines()[0].startswith("Outer | ")


def test_a_vertically_merged_cell_is_read_once_and_spanned_columns_once(tmp_path: Path) -> None:
    document = docx.Document()
    table = document.add_table(rows=3, cols=3)
    merged = table.cell(0, 0).merge(table.cell(2, 0))
    merged.text = "Zebrafish"
    wide = table.cell(0, 1).merge(table.cell(0, 2))
    wide.text = "span"
    for row in (1, 2):
        table.cell(row, 1).text, table.cell(row, 2).text = f"a{row}", "same"
    text = extract_docx(_save(document, tmp_path)).text
    assert text.count("Zebrafish") == 1 and text.count("span") == 1
    assert text.splitlines() == ["Zebrafish | span", " | a1 | same", " | a2 | same"]


def test_tracked_insertions_are_read_and_deletions_are_not(tmp_path: Path) -> None:
    document = docx.Document()
    paragraph = document.add_paragraph("Vitamin D ")
    paragraph._p.append(
        parse_xml(
            f'<w:ins {W} w:id="1" w:author="a" w:date="2026-01-01T00:00:00Z"><w:r><w:t>lowers</w:t></w:r></w:ins>'
        )
    )
    paragraph._p.append(
        parse_xml(
            f'<w:del {W} w:id="2" w:author="a" w:date="2026-01-01T00:00:00Z">'
            "<w:r><w:delText>raises</w:delText></w:r></w:del>"
        )
    )
    paragraph.add_run(" the risk.")
    assert extract_docx(_save(document, tmp_path)).text == "Vitamin D lowers the risk."


def test_content_controls_are_read_at_block_and_run_level(tmp_path: Path) -> None:
    document = docx.Document()
    document.add_paragraph("Before.")
    body = document.element.body
    block_sdt = parse_xml(
        f"<w:sdt {W}><w:sdtPr><w:alias w:val='Summary'/></w:sdtPr><w:sdtContent>"
        "<w:p><w:r><w:t>The quokka service starts at boot.</w:t></w:r></w:p></w:sdtContent></w:sdt>"
    )
    body.insert(list(body).index(body.sectPr), block_sdt)
    paragraph = document.add_paragraph("Owner: ")
    paragraph._p.append(
        parse_xml(f"<w:sdt {W}><w:sdtContent><w:r><w:t>Platform team</w:t></w:r></w:sdtContent></w:sdt>")
    )
    text = extract_docx(_save(document, tmp_path)).text
    assert text == "Before.\n\nThe quokka service starts at boot.\n\nOwner: Platform team"


def test_headings_paragraphs_and_tables_keep_their_order_and_sections(tmp_path: Path) -> None:
    extracted = extract_docx(guide_docx(tmp_path / "guide.docx"))
    assert "Distribution | Command\nDebian | apt" in extracted.text
    assert extracted.title == "Guide"
    assert [s.path for s in extracted.sections][:3] == [("Guide",), ("Guide", "Install"), ("Guide", "Install", "Linux")]


def test_hyphens_tabs_and_a_text_box_read_as_word_shows_them(tmp_path: Path) -> None:
    document = docx.Document()
    paragraph = document.add_paragraph("Anchor ")
    paragraph._p.append(
        parse_xml(
            f"<w:r {W}><w:t>COVID</w:t><w:noBreakHyphen/><w:t>19 vac</w:t><w:softHyphen/><w:t>cine</w:t>"
            '<w:ptab w:relativeTo="margin" w:alignment="right" w:leader="none"/><w:t>p. 3</w:t></w:r>'
        )
    )
    paragraph._p.append(
        parse_xml(
            f"<w:r {W}><w:pict><w:txbxContent><w:p><w:r><w:t>Box line one</w:t></w:r></w:p>"
            "<w:p><w:r><w:t>Box line two</w:t></w:r></w:p></w:txbxContent></w:pict></w:r>"
        )
    )
    text = extract_docx(_save(document, tmp_path)).text
    assert text.splitlines() == ["Anchor COVID-19 vaccine\tp. 3", "Box line one", "Box line two"]
