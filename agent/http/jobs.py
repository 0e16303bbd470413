"""Uploads and folder syncs as ingestion jobs: `POST /v1/documents/files` (multipart, one or many files) queues a
job and answers 202 with its id, `POST /v1/sync` queues a sync of a server folder; `GET /v1/jobs/{id}` and
`GET /v1/jobs` report jobs, all through the app's ingestion service (`agent.core.ingestion`), whose
`JOBS_SERVE_WORKERS` job workers run inside `rag serve`.

Upload rules: the request's `Content-Length` is required and checked against `UPLOAD_MAX_REQUEST_BYTES` before the
body is read (411 / 413); each file against `UPLOAD_MAX_FILE_BYTES` (413 naming it); each file's type is sniffed
from its content (`tools.extract.sniff_bytes`), never trusted from its name or content type (415 naming the file and
the cause); the file name is never used as a path: only its last component is kept, as the document id (after the
optional `prefix` form field). The optional `collection` form field names the collection the documents go into
(`default` unless given; 403 `forbidden_collection` outside the API key's); a job is seen only by callers holding its
collection (any other job id is 404, exactly like a missing one). Starlette spools uploaded files to disk past 1 MiB
while it parses, so memory holds one file at a time. While Postgres is down or restarting, these routes answer 503
`postgres_unavailable` with `Retry-After` (the jobs table raises the store's `StoreUnavailableError`, which the app's
error handlers map like any other route's).

Sync jobs: `POST /v1/sync` (JSON `{"path", "collection", "prefix", "include", "exclude", "groups"}`) queues a job of
kind `sync` that a worker runs like an upload (`tools.jobs.worker`): the folder must be an absolute path inside one of
`SYNC_ROOTS` (symbolic links resolved first; none set: 403 `sync_disabled`; outside: 403 `forbidden_path` naming them),
and the collection one of the caller's (403 `forbidden_collection`). Its summary is the job's `result`.
"""

from __future__ import annotations

import asyncio
import unicodedata
from collections.abc import Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from agent.core.errors import InputError
from agent.core.ingestion import IngestionService, Job, JobFile
from agent.http.access import given_groups
from agent.http.deps import CALLER, AppSettings, Caller, Rag
from agent.http.errors import ERROR_RESPONSES, ApiError
from tools.extract import sniff_bytes
from tools.extract.dispatch import REFUSED
from tools.ingest.sync import within_roots

router = APIRouter(dependencies=[CALLER], responses=ERROR_RESPONSES)
MAX_FILES = 1000
"""Most files in one upload request."""


def get_jobs(rag: Rag) -> IngestionService:
    """The app's ingestion service (`RagApp.ingestion`), which queues and reports the jobs.

    Raises:
        HTTPException: 503 when this app runs without one (a test's `Services` without `ingestion`).
    """
    if rag.ingestion is None:
        raise HTTPException(503, "this server has no ingestion jobs queue", headers={"Retry-After": "5"})
    return rag.ingestion


Jobs = Annotated[IngestionService, Depends(get_jobs)]


class JobAccepted(BaseModel):
    """A queued upload: the job's id, its files and where to follow it."""

    job_id: int
    files: list[str] = Field(description="Document ids the files will be stored under, in upload order.")
    collection: str = Field(description="The collection the documents go into.")
    status_url: str = Field(description="`GET` it for the job's progress.")


def upload_name(filename: str | None, index: int) -> str:
    """The last component of an uploaded file name (POSIX or Windows separators), never a path; `upload-<n>` when
    nothing usable is left; in Unicode NFC (one name in its NFC and NFD spellings is one document id)."""
    name = unicodedata.normalize("NFC", PureWindowsPath(PurePosixPath(filename or "").name).name.strip())
    return name if name and name not in (".", "..") else f"upload-{index}"


@router.post("/v1/documents/files", status_code=202)
async def upload(request: Request, jobs: Jobs, settings: AppSettings, caller: Caller) -> JobAccepted:
    """Queue one job ingesting the uploaded files (multipart field `files`, repeatable; optional fields `prefix`,
    `collection` and `groups`: comma-separated groups allowed to read the documents, only groups you are in unless
    you are an admin of the collection). Answers 202 with the job id at once; a worker ingests them
    (`GET /v1/jobs/{id}`)."""
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        raise HTTPException(411, "an upload needs a Content-Length header")
    if int(length) > settings.upload_max_request_bytes:
        raise HTTPException(
            413, f"request of {length} bytes, over UPLOAD_MAX_REQUEST_BYTES={settings.upload_max_request_bytes}"
        )
    async with request.form(max_files=MAX_FILES, max_fields=10) as form:
        uploads = [v for k, v in form.multi_items() if k == "files" and isinstance(v, UploadFile)]
        prefix = str(form.get("prefix") or "")
        collection = caller.target(str(form.get("collection") or "") or None)
        raw_groups = form.get("groups")
        groups = given_groups(caller, collection, None if raw_groups is None else str(raw_groups))
        if not uploads:
            raise InputError("no files: expected one or more multipart fields named `files`")
        files: list[JobFile] = []
        for index, item in enumerate(uploads, 1):
            name = upload_name(item.filename, index)
            data = await item.read(settings.upload_max_file_bytes + 1)
            if len(data) > settings.upload_max_file_bytes:
                raise HTTPException(413, f"{name}: over UPLOAD_MAX_FILE_BYTES={settings.upload_max_file_bytes} bytes")
            kind = await asyncio.to_thread(sniff_bytes, data, name)
            if kind in REFUSED:
                raise HTTPException(415, f"{name}: {REFUSED[kind]}")
            files.append(JobFile(name, data))
    if len({f.name for f in files}) != len(files):
        raise InputError("two files have the same name; expected distinct names (they become document ids)")
    job_id = await jobs.submit(files, prefix, collection, groups)
    return JobAccepted(
        job_id=job_id, files=[prefix + f.name for f in files], collection=collection, status_url=f"/v1/jobs/{job_id}"
    )


class SyncBody(BaseModel):
    """A folder of the server's to sync (`tools.ingest.sync`)."""

    path: str = Field(description="The folder, on the server, inside one of `SYNC_ROOTS`.")
    collection: str | None = Field(default=None, description="Where its documents go (default `default`).")
    prefix: str = Field(default="", description="Prepended to every document id (ids: paths relative to `path`).")
    include: list[str] = Field(default=[], description="Only files matching one of these globs.")
    exclude: list[str] = Field(default=[], description="Leave out files matching one of these globs.")
    groups: list[str] | None = Field(
        default=None,
        description="The groups allowed to read the documents no `.rag-groups` file covers (default: everyone); only "
        "groups you are in, unless you are an admin of the collection (403 `forbidden_group`).",
    )


class SyncAccepted(BaseModel):
    """A queued sync: the job's id, the folder and collection, and where to follow it."""

    job_id: int
    path: str = Field(description="The folder, resolved (symbolic links followed).")
    collection: str
    status_url: str = Field(description="`GET` it for the job's status and, once done, the sync's summary.")


def allowed_folder(path: str, roots: Sequence[Path]) -> Path:
    """`path` resolved (symbolic links followed) when it is a folder inside one of `roots` (resolved too).

    Raises:
        ApiError: 403 `sync_disabled` when `roots` is empty, 403 `forbidden_path` (naming the roots) for a path
            outside them; InputError (422) for a path holding a NUL character or a path inside them that is not a
            folder.
    """
    if not roots:
        raise ApiError(403, "sync_disabled", "sync over HTTP is disabled: set SYNC_ROOTS to the folders it may sync")
    if "\x00" in path:
        raise InputError("path: holds a NUL character; expected a folder's path")
    folder = within_roots(Path(path), roots)
    allowed = [Path(r).expanduser().resolve() for r in roots]
    if folder is None:
        raise ApiError(
            403,
            "forbidden_path",
            f"{path!r} is not an absolute path inside SYNC_ROOTS ({', '.join(str(r) for r in allowed)})",
        )
    if not folder.is_dir():
        raise InputError(f"{path!r}: no such folder on the server")
    return folder


@router.post("/v1/sync", status_code=202)
async def sync(body: SyncBody, jobs: Jobs, settings: AppSettings, caller: Caller) -> SyncAccepted:
    """Queue one job syncing a folder of the server's into a collection (`rag sync` run by a worker): new and changed
    files ingested, renamed ones moved, deleted ones removed (only documents this folder's syncs stored or took over).
    Answers 202 with the job id at once; the job's `result` holds the sync's summary (`GET /v1/jobs/{id}`)."""
    collection = caller.target(body.collection)
    folder = await asyncio.to_thread(allowed_folder, body.path, settings.sync_roots)
    params: dict[str, Any] = {
        "path": str(folder),
        "prefix": body.prefix,
        "include": body.include,
        "exclude": body.exclude,
    }
    if (groups := given_groups(caller, collection, body.groups)) is not None:
        params["groups"] = list(groups)
    job_id = await jobs.submit_sync(params, collection)
    return SyncAccepted(job_id=job_id, path=str(folder), collection=collection, status_url=f"/v1/jobs/{job_id}")


@router.get("/v1/jobs/{job_id}")
async def job_status(job_id: int, jobs: Jobs, caller: Caller) -> dict[str, Any]:
    """One job of the caller's collections: status (`queued`, `running`, `done`, `failed`), files done of
    files_total, chunks, errors per file (`{"file", "error"}`), attempts, worker, timings (`wall_s`), times (ISO 8601
    UTC), collection. 404 when there is no such job among them."""
    job = await jobs.get(job_id, caller.collections)
    if job is None:
        raise HTTPException(404, f"no job {job_id}")
    return job.to_json()


@router.get("/v1/jobs")
async def job_list(jobs: Jobs, caller: Caller, limit: int = 50) -> dict[str, list[dict[str, Any]]]:
    """The most recent jobs of the caller's collections, newest first."""
    listed: list[Job] = await jobs.list(max(1, min(limit, 500)), caller.collections)
    return {"jobs": [j.to_json() for j in listed]}
