"""The folder sync scenario the sync tests share, over the real servers (`tests/tools/ingest/test_sync.py`) and over
the in-memory doubles (`test_sync_logic.py`): a folder of SciFact files and a printed PDF, plus a document beside it
for ingestion by other means; after the first sync `evals.bench_sync.change_folder` edits, deletes and renames
files, and the second sync must embed exactly the changed chunks in one call."""

from __future__ import annotations

from pathlib import Path

from evals.bench_sync import FolderChange, changed_chunks, write_folder
from tests.document_files import GUIDE_HTML, print_pdf
from tools.ingest.sync import CountingEmbedder
from tools.ingest.sync_plan import SyncReport


def make_folder(tmp_path: Path) -> tuple[Path, list[str], Path]:
    """(the folder to sync: 20 SciFact files and `guide.pdf`, their relative paths, `other/elsewhere.md` outside it
    for ingestion by other means into the synced collection)."""
    folder = (tmp_path / "folder").resolve()
    names = write_folder(folder, 20)
    print_pdf(GUIDE_HTML, folder / "guide.pdf")
    names.append("guide.pdf")
    other = tmp_path / "other" / "elsewhere.md"
    other.parent.mkdir()
    other.write_text("# Elsewhere\n\nThis document was ingested by other means.\n")
    return folder, names, other


def check_second_sync(
    second: SyncReport,
    change: FolderChange,
    before: dict[str, list[str]],
    after: dict[str, list[str]],
    counted: CountingEmbedder,
    embedded_before: tuple[int, int],
) -> None:
    """Assert that the sync after `change` updated, removed and moved what it changed and embedded only the changed
    chunks (`before` / `after`: chunk texts per file) in one call (`embedded_before`: the counter's calls and texts
    before it ran)."""
    assert sorted(second.updated) == sorted(change.edited)
    assert sorted(second.removed) == sorted(change.deleted)
    assert second.moved == change.renamed
    assert (second.added, second.failed) == ([], [])
    expected = changed_chunks(before, after)
    assert 0 < expected < sum(len(t) for t in after.values())
    calls, texts = embedded_before
    assert counted.texts - texts == second.chunks_embedded == expected
    assert counted.calls - calls == second.embed_calls == 1
    assert second.chunks_reused == sum(len(t) for t in after.values()) - expected


def groups_folder(tmp_path: Path) -> Path:
    """A folder whose `hr/` holds a `.rag-groups` naming `hr` beside `hr/pay.md`, and `open.md` at its top (no rules
    file covers it)."""
    folder = tmp_path / "folder"
    (folder / "hr").mkdir(parents=True)
    (folder / "hr" / "pay.md").write_text("# Pay\n\nSalaries are paid monthly.\n")
    (folder / "hr" / ".rag-groups").write_text("hr\n")
    (folder / "open.md").write_text("# Open\n\nThe canteen opens at noon.\n")
    return folder
