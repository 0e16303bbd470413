"""A page render's highlight narrowed to one sentence of the cited chunk (`agent.core.pages.page_image` with
`sentence`): only the chunk's lines that hold the sentence are drawn (`tools.highlight.sentence_boxes`), over a
library double whose chunk has line boxes; the render itself is captured, not run (the real render path:
tests/agent/http/test_page_highlight.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.core import pages
from agent.core.errors import InputError
from tools.access import NOBODY, UNRESTRICTED, Access
from tools.originals import Originals
from tools.records import StoredChunk

TEXT = "Backups run nightly. Restores take an hour. Keys rotate weekly."
LINES = [[3, 72.0, 700.0, 300.0, 712.0], [3, 72.0, 686.0, 300.0, 698.0], [3, 72.0, 672.0, 300.0, 684.0]]
"""Three lines of equal width on page 3, one sentence each (21, 22 and 20 characters)."""


class OneChunk:
    """The `DocumentLibrary` part a page render reads: one chunk of `handbook.pdf`, with line boxes, readable by the
    group `eng` only."""

    async def chunk_metadata(
        self,
        doc_id: str,
        chunk_id: str,
        *,
        collections: Sequence[str] | None = None,
        access: Access = UNRESTRICTED,
    ) -> StoredChunk | None:
        if (doc_id, chunk_id) != ("handbook.pdf", "handbook.pdf#0") or not access.readable(["eng"]):
            return None
        return StoredChunk("default", {"page": 3, "boxes": LINES}, TEXT)


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """The boxes each render was asked to draw (the render thread replaced by a recorder)."""
    calls: list[list[Any]] = []

    async def recorder(fn: Callable[..., Any], *args: Any) -> str:
        calls.append(list(args[4]))  # _render_kept(originals, candidates, doc_id, page, boxes, scale)
        return "png"

    monkeypatch.setattr(pages, "in_render_thread", recorder)
    return calls


async def render(tmp_path: Path, sentence: tuple[int, int] | None) -> None:
    library: Any = OneChunk()
    await pages.page_image(
        library, Originals(tmp_path), "handbook.pdf", 3, chunk_id="handbook.pdf#0", sentence=sentence
    )


async def test_a_sentence_highlights_only_its_own_line(tmp_path: Path, drawn: list[list[Any]]) -> None:
    start = TEXT.index("Restores")
    await render(tmp_path, (start, TEXT.index(".", start) + 1))
    await render(tmp_path, None)
    assert drawn[0] == [(72.0, 686.0, 300.0, 698.0)]  # the second line alone
    assert len(drawn[1]) == 3  # no sentence: the whole chunk


@pytest.mark.parametrize("sentence", [(5, 4), (0, len(TEXT) + 1), (-1, 3)])
async def test_a_sentence_outside_the_chunk_is_refused_naming_span(
    tmp_path: Path, drawn: list[list[Any]], sentence: tuple[int, int]
) -> None:
    with pytest.raises(InputError, match="span"):
        await render(tmp_path, sentence)
    assert not drawn


async def test_a_sentence_without_a_chunk_is_refused(tmp_path: Path) -> None:
    library: Any = OneChunk()
    with pytest.raises(InputError, match="span needs chunk"):
        await pages.page_image(library, Originals(tmp_path), "handbook.pdf", 3, sentence=(0, 4))


async def test_a_chunk_the_reader_may_not_read_is_not_found(tmp_path: Path, drawn: list[list[Any]]) -> None:
    library: Any = OneChunk()
    with pytest.raises(pages.PageError, match="not a stored chunk") as refused:
        await pages.page_image(
            library, Originals(tmp_path), "handbook.pdf", 3, chunk_id="handbook.pdf#0", access=NOBODY
        )
    assert refused.value.kind == "chunk_not_found" and not drawn
