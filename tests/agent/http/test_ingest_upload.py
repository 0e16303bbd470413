"""`POST /v1/documents/files` on a real `rag serve` over the real Postgres and Triton: one request with several real
files answers 202 with a job id at once, the job worker inside `rag serve` ingests them, `GET /v1/jobs/{id}` shows
the progress and per-file errors; size limits, sniffed types and hostile file names are refused or neutralised."""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent.config.settings import Settings
from agent.http.jobs import upload_name
from tests.conftest import REPO_ROOT
from tests.document_files import GUIDE_HTML, guide_docx, print_pdf
from tests.http_server import RagServe
from tools.originals import Originals

DONE_WITHIN_S = 600.0
"""A bound on waiting for the job on a loaded machine (the outcome does not depend on it)."""


@pytest.fixture
def served(triton_server: Settings, fresh_db: str, tmp_path: Path) -> Iterator[RagServe]:
    env = {
        "DATABASE_URL": fresh_db,
        "ORIGINALS_DIR": str(tmp_path / "originals"),
        "MODEL_REPOSITORY": str(REPO_ROOT / "model_repository"),
        "UPLOAD_MAX_FILE_BYTES": "200000",
        "UPLOAD_MAX_REQUEST_BYTES": "600000",
        "JOBS_POLL_S": "0.2",
    }
    with RagServe(triton_server, env) as server:
        yield server


def wait_done(client: httpx.Client, url: str) -> dict[str, object]:
    deadline = time.monotonic() + DONE_WITHIN_S
    while time.monotonic() < deadline:
        job = client.get(url).json()
        if job["status"] in ("done", "failed"):
            return dict(job)
        time.sleep(0.3)
    raise AssertionError(f"job not finished within {DONE_WITHIN_S} s: {job}")


def test_upload_queues_a_job_that_the_server_runs(served: RagServe, tmp_path: Path) -> None:
    pdf = print_pdf(GUIDE_HTML, tmp_path / "guide.pdf").read_bytes()
    docx = guide_docx(tmp_path / "guide.docx").read_bytes()
    files = [
        ("files", ("../../etc/handbook.pdf", pdf, "text/plain")),  # a path and a wrong content type
        ("files", ("C:\\Users\\me\\guide.docx", docx, "application/octet-stream")),
        ("files", ("page.html", GUIDE_HTML.encode(), "text/html")),
        ("files", ("notes.md", b"# Notes\n\n## Backups\n\nThe narwhal backup runs nightly.\n", "text/markdown")),
    ]
    with httpx.Client(base_url=served.url, timeout=60) as client:
        accepted = client.post("/v1/documents/files", files=files, data={"prefix": "up/"})
        assert accepted.status_code == 202, accepted.text
        body = accepted.json()
        assert body["files"] == ["up/handbook.pdf", "up/guide.docx", "up/page.html", "up/notes.md"]
        job = wait_done(client, body["status_url"])
        assert (job["status"], job["files_done"], job["files_total"], job["errors"]) == ("done", 4, 4, [])
        assert int(str(job["chunks"])) >= 4 and job["attempts"] == 1
        listed = client.get("/v1/documents").json()
        stored = {d["doc_id"] for d in listed["documents"]}
        assert stored == {"up/handbook.pdf", "up/guide.docx", "up/page.html", "up/notes.md"}
        assert not (Path("/etc") / "handbook.pdf").exists()
        originals = Originals(tmp_path / "originals")
        kept = originals.find("default", "up/handbook.pdf")
        assert kept is not None and kept.read_bytes() == pdf  # the upload's bytes, kept for its pages
        shown = client.get("/v1/documents/up/handbook.pdf/pages/2", params={"chunk": "up/handbook.pdf#1"})
        assert shown.status_code == 200 and shown.headers["content-type"] == "image/png", shown.text
        assert client.delete("/v1/documents/up/notes.md").status_code == 200
        assert originals.find("default", "up/notes.md") is None and originals.find("default", "up/page.html")
        assert client.get("/v1/jobs").json()["jobs"][0]["id"] == body["job_id"]
        assert client.get("/v1/jobs/999999").status_code == 404

        big = client.post("/v1/documents/files", files=[("files", ("big.txt", b"x" * 250_000, "text/plain"))])
        assert big.status_code == 413 and "big.txt: over UPLOAD_MAX_FILE_BYTES=200000" in big.json()["detail"]
        many = [("files", (f"p{i}.txt", b"y" * 150_000, "text/plain")) for i in range(5)]
        too_much = client.post("/v1/documents/files", files=many)
        assert too_much.status_code == 413 and "UPLOAD_MAX_REQUEST_BYTES" in too_much.json()["detail"]
        image = client.post(
            "/v1/documents/files",
            files=[("files", ("photo.pdf", b"GIF89a" + bytes(256), "application/pdf"))],
        )
        assert image.status_code == 415 and "photo.pdf: binary content of an unsupported type" in image.json()["detail"]
        empty = client.post("/v1/documents/files", files=[("files", ("zero.txt", b"", "text/plain"))])
        assert empty.status_code == 415 and "zero.txt: the file is empty" in empty.json()["detail"]
        none = client.post(
            "/v1/documents/files", data={"prefix": "x"}, files=[("other", ("a.txt", b"a", "text/plain"))]
        )
        assert none.status_code == 422 and "files" in none.json()["detail"]


def test_one_upload_name_in_nfc_and_nfd_is_one_document_id() -> None:
    """A name saved in NFD (macOS) and in NFC names one document (the route refuses the two in one upload as the
    same name)."""
    nfc, nfd = unicodedata.normalize("NFC", "café.md"), unicodedata.normalize("NFD", "café.md")
    assert upload_name(nfd, 1) == upload_name(nfc, 2) == nfc
