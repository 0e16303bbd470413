"""`rag ingest DIR` against the real Postgres and the real Triton: folders walked with globs, real PDF, HTML, DOCX,
Markdown and text files stored with their pages and sections, every kind of bad file failing alone with its cause,
nothing of a failed file stored, and the exit code saying a file failed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from agent.config.settings import Settings
from tests.conftest import REPO_ROOT, cli_env
from tests.document_files import GUIDE_HTML, empty_pdf, encrypted_pdf, guide_docx, print_pdf, zip_named
from tools.embedder import TritonEmbedder
from tools.model_specs import get_spec
from tools.store import VectorStore

MAX_FILE_BYTES = 200_000
BAD = {
    "bad/encrypted.pdf": "encrypted",
    "bad/empty.pdf": "no pages",
    "bad/scan.pdf": "no text layer",
    "bad/truncated.pdf": "not a readable PDF",
    "bad/scripts.html": "no readable main content",
    "bad/zero.txt": "empty (0 bytes)",
    "bad/archive.pdf": "a ZIP archive",
    "bad/big.txt": f"over the limit of {MAX_FILE_BYTES} bytes",
}
GOOD = ["docs/guide.docx", "docs/guide.html", "docs/guide.pdf", "docs/notes.md", "docs/sub/readme.txt"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/ with good files, a bad/ folder of every kind of bad file, a GIF (unsupported), and drafts/ to
    exclude."""
    root = tmp_path_factory.mktemp("tree")
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "bad").mkdir()
    (docs / "drafts").mkdir()
    print_pdf(GUIDE_HTML, docs / "guide.pdf")
    (docs / "guide.html").write_text(GUIDE_HTML)
    guide_docx(docs / "guide.docx")
    (docs / "notes.md").write_text("# Notes\n\n## Backups\n\nThe narwhal backup job runs every night at two.\n")
    (docs / "sub" / "readme.txt").write_text("Read me: the okapi gateway listens on port 8080.\n")
    (docs / "photo.gif").write_bytes(b"GIF89a" + bytes(range(256)) * 4)
    (docs / "drafts" / "draft.md").write_text("# Draft\n\nnot ready")
    bad = docs / "bad"
    encrypted_pdf(docs / "guide.pdf", bad / "encrypted.pdf")
    empty_pdf(bad / "empty.pdf")
    print_pdf(
        '<html><body><svg width="300" height="200"><rect width="300" height="200"/></svg></body></html>',
        bad / "scan.pdf",
    )
    (bad / "truncated.pdf").write_bytes((docs / "guide.pdf").read_bytes()[:1500])
    (bad / "scripts.html").write_text(
        "<html><head><script>var a = 1;</script></head><body><script>go()</script></body></html>"
    )
    (bad / "zero.txt").write_bytes(b"")
    zip_named(bad / "archive.pdf")
    (bad / "big.txt").write_text("word " * (MAX_FILE_BYTES // 4))
    return root


def rag(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


async def stored(url: str) -> dict[str, int]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT d.doc_id, count(c.id) AS n FROM documents d LEFT JOIN chunks c ON c.document_id = d.id "
            "GROUP BY d.doc_id"
        )
    finally:
        await conn.close()
    return {r["doc_id"]: r["n"] for r in rows}


async def test_folder_ingest_stores_good_files_and_names_each_bad_one(
    triton_server: Settings, fresh_db: str, tree: Path, embedder: TritonEmbedder
) -> None:
    env = cli_env(triton_server) | {
        "DATABASE_URL": fresh_db,
        "MODEL_REPOSITORY": str(REPO_ROOT / "model_repository"),
        "INGEST_MAX_FILE_BYTES": str(MAX_FILE_BYTES),
    }
    result = rag(env, "ingest", "--no-ceiling", "--json", "docs", "--exclude", "drafts/*", cwd=tree)
    assert result.returncode == 1, result.stderr  # files failed: the exit code says so
    assert result.stdout.strip(), result.stderr
    report = json.loads(result.stdout)
    errors = {e["path"]: e["reason"] for e in report["file_errors"]}
    for name, cause in BAD.items():
        path = f"docs/{name}"
        assert path in errors, (path, errors)
        assert errors[path].startswith(path) and cause in errors[path], errors[path]
    assert "OCR (OCR_LANGUAGE=eng) read none" in errors["docs/bad/scan.pdf"]
    assert report["files"]["unsupported"] == {"stored": 0, "unchanged": 0, "skipped": 1, "failed": 0}
    assert report["files"]["pdf"] == {"stored": 1, "unchanged": 0, "skipped": 0, "failed": 4}
    assert report["files"]["zip"]["failed"] == 1  # counted by its sniffed type, not its name
    assert report["files"]["html"]["stored"] == 1 and report["files"]["html"]["failed"] == 1
    assert report["files"]["docx"]["stored"] == 1 and report["files"]["markdown"]["stored"] == 1
    assert report["pages"] == 2 and report["pages_per_s"] > 0
    chunks = await stored(fresh_db)
    assert sorted(chunks) == GOOD  # nothing of a failed file, nothing excluded, nothing unsupported
    assert all(n > 0 for n in chunks.values())

    again = rag(env, "ingest", "--no-ceiling", "docs", "--include", "*.pdf", "--include", "*.md", cwd=tree)
    assert again.returncode == 1, again.stderr
    assert "pdf: 0 stored, 1 unchanged, 0 skipped, 4 failed (files)" in again.stdout
    assert "markdown: 1 stored, 1 unchanged, 0 skipped, 0 failed (files)" in again.stdout  # drafts/ now included
    assert "PDF text extraction: 2 pages in" in again.stdout and "pages/s" in again.stdout
    assert "failed: docs/bad/encrypted.pdf: the PDF is encrypted" in again.stdout
    assert "docs/drafts/draft.md" in await stored(fresh_db)

    spec = get_spec(triton_server.embedder_model)
    async with VectorStore(fresh_db, spec.name, spec.dim) as store:
        query = await embedder.embed(["installer asks for an administrator account quokka"], kind="query")
        hits = {h.doc_id: h for h in reversed(await store.dense_search(query[0], 20))}  # each doc's best chunk
    assert hits["docs/guide.pdf"].metadata["page"] == 2 and hits["docs/guide.pdf"].metadata["boxes"]
    assert hits["docs/guide.html"].metadata["section"] == ["Guide", "Install", "Windows"]
    assert hits["docs/guide.docx"].metadata["section"] == ["Guide", "Install", "Windows"]
    assert all("span" in hit.metadata for hit in hits.values())


def test_every_bad_file_kind_is_in_the_tree(tree: Path) -> None:
    assert shutil.which("chromium") and all((tree / "docs" / name).is_file() for name in BAD)


def latin1_names(folder: Path) -> None:
    """`folder` with `good.md` and `r\xe9sum\xe9.md` (a Latin-1 name, not valid UTF-8)."""
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nHerons fish at dawn in the estuary.\n")
    Path(os.fsdecode(bytes(folder) + b"/r\xe9sum\xe9.md")).write_text("# Resume\n\nOtters float on their backs.\n")


async def test_a_file_name_that_is_not_utf8_fails_alone(triton_server: Settings, fresh_db: str, tmp_path: Path) -> None:
    """`rag ingest DIR` and `rag sync DIR` of a folder holding a Latin-1 file name (`r\\xe9sum\\xe9.md`, as a
    Windows share or an old archive gives): that file fails, named readably, and the good file is stored; a second
    sync says the same and stores nothing twice."""
    latin1_names(tmp_path / "names")
    env = cli_env(triton_server) | {
        "DATABASE_URL": fresh_db,
        "MODEL_REPOSITORY": str(REPO_ROOT / "model_repository"),
        "PYTHONPATH": str(REPO_ROOT),  # this checkout's code, run from another folder
    }
    result = rag(env, "ingest", "--no-ceiling", "names", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "failed: names/r\\xe9sum\\xe9.md: the file name is not valid UTF-8" in result.stdout, result.stdout
    assert sorted(await stored(fresh_db)) == ["names/good.md"]
    for _ in range(2):
        synced = rag(env, "sync", "--collection", "synced", "--json", "names", cwd=tmp_path)
        assert synced.returncode == 1, synced.stderr
        report = json.loads(synced.stdout)
        assert [e["reason"].split(":")[1:] for e in report["failed"]] == [
            [" the file name is not valid UTF-8 (Latin-1?); rename it"]
        ]
    assert report["unchanged"] == 1
