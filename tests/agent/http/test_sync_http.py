"""`POST /v1/sync` in-process over a recording jobs queue: disabled without `SYNC_ROOTS` (403 `sync_disabled`), a
path outside them refused naming them (403 `forbidden_path`, also through a symbolic link), a missing folder or a
path holding a NUL 422, a folder inside one queued as a sync job (202 with its id) in the caller's collection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.http.jobs import get_jobs
from tests.http_rig import assert_error, serve
from tools.scope import DEFAULT_COLLECTION


class RecordingQueue:
    """The jobs queue's `submit_sync`, recording what was queued."""

    def __init__(self) -> None:
        self.queued: list[tuple[dict[str, Any], str]] = []

    async def submit_sync(self, params: dict[str, Any], collection: str = DEFAULT_COLLECTION) -> int:
        self.queued.append((params, collection))
        return len(self.queued)


def served(roots: list[Path]) -> tuple[Any, RecordingQueue]:
    app = serve(sync_roots=tuple(roots))
    queue = RecordingQueue()
    app.app.dependency_overrides[get_jobs] = lambda: queue
    return app, queue


async def test_sync_over_http_is_disabled_without_sync_roots(tmp_path: Path) -> None:
    app, queue = served([])
    async with app.client() as client:
        response = await client.post("/v1/sync", json={"path": str(tmp_path)})
    assert_error(response, 403, "sync_disabled", "SYNC_ROOTS")
    assert queue.queued == []


async def test_a_folder_outside_the_roots_is_refused_naming_them(tmp_path: Path) -> None:
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    (allowed / "link").symlink_to(other)
    app, queue = served([allowed])
    async with app.client() as client:
        for path in (str(other), str(allowed / "link"), str(allowed / ".." / "other"), "allowed"):
            response = await client.post("/v1/sync", json={"path": path})
            assert_error(response, 403, "forbidden_path", str(allowed))
        missing = await client.post("/v1/sync", json={"path": str(allowed / "missing")})
        nul = await client.post("/v1/sync", json={"path": str(allowed) + "/a\x00b"})
    assert_error(missing, 422, "bad_request", "no such folder")
    assert_error(nul, 422, "bad_request", "path: holds a NUL character")
    assert queue.queued == []


async def test_a_folder_inside_the_roots_is_queued_as_a_sync_job(tmp_path: Path) -> None:
    (tmp_path / "handbook").mkdir()
    app, queue = served([tmp_path])
    body = {"path": str(tmp_path / "handbook"), "collection": "kb", "include": ["*.md"], "exclude": ["drafts/*"]}
    async with app.client() as client:
        response = await client.post("/v1/sync", json=body)
        bad = await client.post("/v1/sync", json=body | {"collection": "Bad Name"})
    assert response.status_code == 202, response.text
    assert response.json() == {
        "job_id": 1,
        "path": str((tmp_path / "handbook").resolve()),
        "collection": "kb",
        "status_url": "/v1/jobs/1",
    }
    folder = str((tmp_path / "handbook").resolve())
    assert queue.queued == [({"path": folder, "prefix": "", "include": ["*.md"], "exclude": ["drafts/*"]}, "kb")]
    assert bad.status_code == 422
