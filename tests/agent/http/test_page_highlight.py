"""The passage where it stands, on the real stack (Postgres, Triton): a PDF printed by Chromium is ingested with
`rag ingest` (its original kept under ORIGINALS_DIR), and every chunk's line boxes cover the PDFium boxes of every
character of its words, read independently of the extraction with pypdfium2's `get_charbox`; the page route draws
its highlight where those boxes are, on a PNG of the page's size at the scale asked for, for the key of the
document's collection only; deleting the document deletes its original."""

from __future__ import annotations

import io
import json
from pathlib import Path

import asyncpg
import httpx
import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.http import create_app
from agent.http.deps import app_state, get_keys, get_rag
from tests.conftest import LOADED_MACHINE_TRITON_TIMEOUT_S, run_cli
from tests.document_files import print_pdf
from tools import render_page
from tools.extract.pdf import EXTRACTOR
from tools.originals import Originals

SENTENCES = [
    "The narwhal maintenance schedule begins with a full inspection of every pump in the eastern wing.",
    "Technicians record pressure readings twice a day and compare them with the figures of the previous week.",
    "A reading more than ten percent above the weekly mean is escalated to the duty engineer at once.",
    "Filters are replaced every ninety days, or sooner when the flow rate falls below the rated minimum.",
    "Spare parts are kept in the locked cabinet beside the control room, listed in the inventory book.",
]
HTML = (
    '<!doctype html><html><head><style>body { font-family: "DejaVu Serif"; font-size: 12pt; width: 150mm; }'
    "</style></head><body>"
    + "".join(f"<p>{' '.join(SENTENCES[i:] + SENTENCES[:i])}</p>" for i in range(5))
    + '<div style="break-before: page"></div>'
    + "".join(f"<p>{' '.join(reversed(SENTENCES[i:] + SENTENCES[:i]))}</p>" for i in range(5))
    + "</body></html>"
)
"""Two printed pages of paragraphs wrapped over many lines: chunks of several lines each."""
TOLERANCE_PT = 0.25
"""How far a character's box may reach past its chunk's rectangles (points): rounding is outwards to 0.1 pt."""
SCALE = 1.5


def _flat(text: str) -> tuple[str, list[int]]:
    """`text` without whitespace, and the index in `text` of each character kept."""
    kept = [(ch, i) for i, ch in enumerate(text) if not ch.isspace()]
    return "".join(ch for ch, _ in kept), [i for _, i in kept]


def _char_boxes(pdf: Path, page: int, chunk_text: str) -> list[tuple[float, float, float, float]]:
    """PDFium's box of each non-space character of `chunk_text` on page `page`, found by matching the chunk's
    characters (spaces aside) in the page's own text, character index = text index (as Chromium's PDFs give)."""
    document = pdfium.PdfDocument(pdf)
    try:
        textpage = document[page - 1].get_textpage()
        raw = textpage.get_text_range()
        assert len(raw) == textpage.count_chars()
        page_flat, page_index = _flat(raw)
        chunk_flat, _ = _flat(chunk_text)
        at = page_flat.find(chunk_flat)
        assert at >= 0 and page_flat.find(chunk_flat, at + 1) < 0, "the chunk is found once on its page"
        return [textpage.get_charbox(page_index[at + k]) for k in range(len(chunk_flat))]
    finally:
        document.close()


def _inside(box: tuple[float, float, float, float], rects: list[list[float]]) -> bool:
    left, bottom, right, top = box
    return any(
        left >= r[1] - TOLERANCE_PT and bottom >= r[2] - TOLERANCE_PT and right <= r[3] + TOLERANCE_PT
        and top <= r[4] + TOLERANCE_PT
        for r in rects
    )  # fmt: skip


async def test_a_cited_chunk_s_boxes_cover_its_words_and_the_page_shows_them(
    triton_server: Settings, fresh_db: str, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf = print_pdf(HTML, docs / "handbook.pdf")
    originals = tmp_path / "originals"
    env = {
        "DATABASE_URL": fresh_db,
        "ORIGINALS_DIR": str(originals),
        "TRITON_TIMEOUT_S": str(LOADED_MACHINE_TRITON_TIMEOUT_S),
    }
    ingested = run_cli(
        triton_server, "ingest", str(docs), "--root", str(docs), "--collection", "manuals", extra_env=env
    )
    assert ingested.returncode == 0, ingested.stderr
    kept = Originals(originals).find("manuals", "handbook.pdf")
    assert kept is not None and kept.read_bytes() == pdf.read_bytes()

    connection = await asyncpg.connect(fresh_db)
    try:
        rows = await connection.fetch("SELECT chunk_id, text, metadata FROM chunks ORDER BY chunk_index")
    finally:
        await connection.close()
    chunks = [(r["chunk_id"], r["text"], json.loads(r["metadata"])) for r in rows]
    assert len(chunks) >= 4 and {m["page"] for _, _, m in chunks} == {1, 2}
    for chunk_id, text, metadata in chunks:
        boxes = metadata["boxes"]
        assert 2 <= len(boxes) <= 40, (chunk_id, len(boxes))  # one per line: a handful
        assert {b[0] for b in boxes} == {metadata["page"]}
        assert metadata["span"][1] - metadata["span"][0] == len(text)
        outside = [b for b in _char_boxes(pdf, metadata["page"], text) if not _inside(b, boxes)]
        assert not outside, (chunk_id, outside[:3], boxes)

    settings = triton_server.model_copy(update={"database_url": fresh_db, "originals_dir": originals})
    keys = InMemoryKeys()
    _, manuals = await keys.create(["manuals"])
    _, other = await keys.create(["other"])
    cited_id, _, cited = next(c for c in chunks if c[2]["page"] == 2)
    try:
        async with RagApp(settings) as rag:
            app = create_app(settings)
            app_state(app).keys = keys
            app.dependency_overrides[get_keys] = lambda: keys
            app.dependency_overrides[get_rag] = lambda: rag
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://rag", timeout=120) as client:
                url = "/v1/documents/handbook.pdf/pages/2"
                chunk = {"chunk": cited_id, "scale": SCALE}
                plain = await client.get(url, params={"scale": SCALE}, headers={"Authorization": f"Bearer {manuals}"})
                marked = await client.get(url, params=chunk, headers={"Authorization": f"Bearer {manuals}"})
                refused = await client.get(url, params=chunk, headers={"Authorization": f"Bearer {other}"})
    finally:
        EXTRACTOR.close()
        render_page.close()
    assert plain.status_code == marked.status_code == 200, marked.text
    assert refused.status_code == 404 and refused.json()["error"] == "chunk_not_found"
    width, height = pdfium.PdfDocument(pdf).get_page_size(1)
    image = np.asarray(Image.open(io.BytesIO(marked.content)).convert("RGB")).astype(int)
    base = np.asarray(Image.open(io.BytesIO(plain.content)).convert("RGB")).astype(int)
    assert abs(image.shape[1] - width * SCALE) <= 1 and abs(image.shape[0] - height * SCALE) <= 1
    changed = (image != base).any(axis=2)
    for _, left, bottom, right, top in cited["boxes"]:
        x0, x1 = int(left * SCALE) + 2, int(right * SCALE) - 2
        y0, y1 = int((height - top) * SCALE) + 2, int((height - bottom) * SCALE) - 2
        region, before = image[y0:y1, x0:x1], base[y0:y1, x0:x1]
        assert changed[y0:y1, x0:x1].all()  # the whole line is tinted
        assert region[..., 2].mean() < before[..., 2].mean() - 20  # yellow: less blue
    mask = np.zeros_like(changed)
    for _, left, bottom, right, top in cited["boxes"]:
        mask[int((height - top) * SCALE) - 4 : int((height - bottom) * SCALE) + 5,
             int(left * SCALE) - 4 : int(right * SCALE) + 5] = True  # fmt: skip
    assert not changed[~mask].any()  # nothing drawn elsewhere

    out = tmp_path / "page.png"
    args = ("docs", "page", "handbook.pdf", "2", "--chunk", cited_id, "--scale", str(SCALE), "--out", str(out))
    printed = run_cli(triton_server, *args, extra_env=env)
    assert printed.returncode == 0, printed.stderr
    assert f"page 2 of 2, {image.shape[1]}x{image.shape[0]} pixels" in printed.stdout
    assert (np.asarray(Image.open(out).convert("RGB")).astype(int) == image).all()  # the route's image
    missing = run_cli(triton_server, "docs", "page", "handbook.pdf", "9", "--out", str(out), extra_env=env)
    assert missing.returncode == 1 and "it has 2 page(s)" in missing.stderr

    deleted = run_cli(triton_server, "docs", "delete", "handbook.pdf", "--collection", "manuals", extra_env=env)
    assert deleted.returncode == 0, deleted.stderr
    assert Originals(originals).find("manuals", "handbook.pdf") is None


@pytest.fixture(autouse=True)
def _no_leftover_worker() -> object:
    yield None
    EXTRACTOR.close()
    render_page.close()
