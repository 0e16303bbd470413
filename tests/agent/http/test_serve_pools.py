"""One `rag serve` app (`create_app(settings)`, its lifespan entering the `RagApp` of `build_services(serving=True)`)
over the real Postgres and Triton opens exactly one read and one write pool, the store's, and sets the store's
schema up once, while it answers a document added over HTTP (on the ingestion service's bulk embedder), lists jobs
and runs an uploaded file's job with its own job workers: the answer path, the ingestion service, the jobs and the
API keys share one store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from agent.config.settings import Settings
from agent.core.wiring import Clients
from agent.http import create_app
from agent.http.deps import opened_rag
from tools.store import schema

pytestmark = pytest.mark.stack

DONE_WITHIN_S = 600.0
"""A bound on waiting for the job on a loaded machine (the outcome does not depend on it)."""


async def test_one_serve_app_opens_one_read_and_one_write_pool(
    triton_server: Settings, fresh_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools: list[Any] = []
    create_pool = asyncpg.create_pool

    def recorded_pool(*args: Any, **kwargs: Any) -> Any:
        pool = create_pool(*args, **kwargs)
        pools.append(pool)
        return pool

    set_ups: list[str] = []
    set_up = schema.set_up

    async def recorded_set_up(*args: Any, **kwargs: Any) -> str:
        set_ups.append("set up")
        return await set_up(*args, **kwargs)

    monkeypatch.setattr(asyncpg, "create_pool", recorded_pool)
    monkeypatch.setattr(schema, "set_up", recorded_set_up)
    settings = triton_server.model_copy(
        update={
            "database_url": fresh_db,
            "agent_policy": "always",  # no LLM call at start-up
            "jobs_serve_workers": 2,
            "jobs_poll_s": 0.2,
            "originals_dir": tmp_path / "originals",
        }
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        rag = opened_rag(app)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rag", timeout=60) as client:
            doc = {"doc_id": "scratch", "title": "Scratch", "text": "Scratch space lives under /tmp."}
            added = await client.post("/v1/documents", json={"documents": [doc]})
            assert added.status_code == 201 and added.json()["added"] == 1, added.text
            files = {"files": ("notes.md", b"# Notes\n\nThe narwhal backup runs nightly.\n", "text/markdown")}
            accepted = await client.post("/v1/documents/files", files=files)
            assert accepted.status_code == 202, accepted.text
            job = await wait_done(client, accepted.json()["status_url"])
            assert job["status"] == "done" and job["chunks"] >= 1, job
            assert (await client.get("/v1/jobs")).status_code == 200
        clients = rag.services.resources[0]
        assert isinstance(clients, Clients)
        store = clients.store
        assert rag.ingestion is not None and rag.ingestion.store is store
        assert sorted(map(id, pools)) == sorted(map(id, [store.pool, store.write_pool])), pools
        assert set_ups == ["set up"]


async def wait_done(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    deadline = time.monotonic() + DONE_WITHIN_S
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = (await client.get(url)).json()
        if job["status"] in ("done", "failed"):
            return job
        await asyncio.sleep(0.3)
    raise AssertionError(f"job not finished within {DONE_WITHIN_S} s: {job}")
