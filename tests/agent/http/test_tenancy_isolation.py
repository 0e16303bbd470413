"""Two tenants on one `rag serve` (real Postgres, real Triton, a fake LLM): keys made with `rag keys create`, scoped to
collections `tenant-a` and `tenant-b`, holding near-duplicate documents under the same doc ids. Neither ever sees
the other's documents: not in a listing, a count, a delete, a job, nor in the passages an answer is given or the
citations it makes, whether asked over `/v1/ask`, the OpenAI-compatible API (the official `openai` SDK) or MCP over
streamable HTTP (the `mcp` SDK's client); naming the other's document, job or conversation reads exactly like naming
a missing one."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import asyncpg
import httpx
import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agent.config.settings import Settings
from tests.conftest import REPO_ROOT, run_cli
from tests.fake_openai import FakeOpenAIServer
from tests.http_server import RagServe, sse_events
from tests.store_helpers import scratch_databases

TENANTS = ("tenant-a", "tenant-b")
N_DOCS = 12
TOPICS = ("zebra migration", "okapi habitat", "giraffe feeding", "narwhal tusks", "aardvark burrows", "lemur calls")
JOB_DONE_WITHIN_S = 300.0
"""Bound of the wait for one small upload job on a loaded machine (the job takes ~1 s alone)."""


def text_of(tenant: str, i: int) -> str:
    """Near-duplicates: the two tenants' document i differ in one word, the tenant's name."""
    topic = TOPICS[i % len(TOPICS)]
    return f"Field report {i} on {topic}: the {topic} observed this season was recorded by the {tenant} team."


@pytest.fixture(scope="module")
async def fresh_db(postgres_url: str) -> AsyncIterator[str]:
    """One scratch database for the module (its tests share the served app), dropped afterwards."""
    async with scratch_databases(postgres_url, "tenancy") as (url,):
        yield url


@pytest.fixture(scope="module")
def tokens(settings: Settings, fresh_db: str) -> dict[str, str]:
    """tenant -> the token `rag keys create --json` printed for it."""
    made = {}
    for tenant in TENANTS:
        result = run_cli(
            settings,
            "keys",
            "create",
            "--collections",
            tenant,
            "--name",
            tenant,
            "--json",
            extra_env={"DATABASE_URL": fresh_db},
        )
        assert result.returncode == 0, result.stderr
        made[tenant] = json.loads(result.stdout)["token"]
    return made


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture(scope="module")
def server(
    triton_server: Settings, fresh_db: str, tokens: dict[str, str], fake_llm: FakeOpenAIServer
) -> Iterator[RagServe]:
    env = {
        "DATABASE_URL": fresh_db,
        "MODEL_REPOSITORY": str(REPO_ROOT / "model_repository"),
        "LLM_BASE_URL": fake_llm.base_url,
        "VLLM_PORT": str(fake_llm.port),
        "LLM_MODEL": "fake",
        "LLM_MAX_RETRIES": "0",
        "REFUSAL_MIN_SCORE": "0",
        "JOBS_POLL_S": "0.2",
        "AGENT_POLICY": "always",
        # A revoked key is refused from the next request (the cache: tests/agent/core/test_keys.py).
        "API_KEYS_CACHE_S": "0",
    }
    with RagServe(triton_server, env) as served:
        yield served


def client(server: RagServe, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=120)


@pytest.fixture(scope="module")
def stored(server: RagServe, tokens: dict[str, str]) -> dict[str, str]:
    """Each tenant's documents `report-0..N-1` (same ids, near-duplicate texts) and `only-<tenant>`."""
    for tenant in TENANTS:
        documents = [{"doc_id": f"report-{i}", "text": text_of(tenant, i)} for i in range(N_DOCS)]
        documents.append({"doc_id": f"only-{tenant}", "text": f"A note only the {tenant} team keeps."})
        with client(server, tokens[tenant]) as http:
            added = http.post("/v1/documents", json={"documents": documents, "collection": tenant})
        assert added.status_code == 201 and added.json()["added"] == N_DOCS + 1, added.text
    return tokens


def test_keys_are_listed_without_tokens_and_stored_as_hashes(
    settings: Settings, fresh_db: str, tokens: dict[str, str]
) -> None:
    listed = run_cli(settings, "keys", "list", "--json", extra_env={"DATABASE_URL": fresh_db})
    assert listed.returncode == 0, listed.stderr
    keys = json.loads(listed.stdout)["keys"]
    assert [(k["name"], k["collections"], k["revoked_at"]) for k in keys] == [
        ("tenant-a", ["tenant-a"], None),
        ("tenant-b", ["tenant-b"], None),
    ]
    for token in tokens.values():
        assert token not in listed.stdout and hashlib.sha256(token.encode()).hexdigest() not in listed.stdout


async def test_the_table_holds_only_hashes(fresh_db: str, tokens: dict[str, str]) -> None:
    conn = await asyncpg.connect(fresh_db)
    try:
        rows = [dict(r) for r in await conn.fetch("SELECT * FROM api_keys ORDER BY id")]
    finally:
        await conn.close()
    assert [r["hash"] for r in rows] == [hashlib.sha256(tokens[t].encode()).hexdigest() for t in TENANTS]
    dumped = repr(rows)
    assert not any(token in dumped or token.removeprefix("rag_") in dumped for token in tokens.values())


def test_requests_need_a_key_once_keys_exist(server: RagServe) -> None:
    with client(server, None) as anonymous, client(server, "rag_" + "x" * 43) as forged:
        for http in (anonymous, forged):
            for method, path in (("GET", "/v1/documents"), ("POST", "/v1/ask"), ("GET", "/v1/jobs")):
                response = http.request(method, path, json={"question": "zebra"} if method == "POST" else None)
                assert response.status_code == 401 and response.json()["error"] == "unauthorized", response.text


def test_listings_counts_and_deletes_never_cross_tenants(server: RagServe, stored: dict[str, str]) -> None:
    a, b = TENANTS
    with client(server, stored[a]) as http_a, client(server, stored[b]) as http_b:
        listed = http_a.get("/v1/documents", params={"limit": 5})
        pages = [listed.json()]
        while pages[-1]["next_cursor"]:
            pages.append(http_a.get("/v1/documents", params={"limit": 5, "cursor": pages[-1]["next_cursor"]}).json())
        documents = [d for page in pages for d in page["documents"]]
        assert {d["collection"] for d in documents} == {a} and len(documents) == N_DOCS + 1
        assert all(page["total"] == N_DOCS + 1 for page in pages)
        assert http_a.get("/v1/documents", params={"collection": b}).json()["error"] == "forbidden_collection"

        outside = http_a.delete(f"/v1/documents/only-{b}")
        missing = http_a.delete("/v1/documents/only-nobody")
        assert outside.status_code == missing.status_code == 404
        assert outside.json() == {"error": "document_not_found", "detail": f"document 'only-{b}' is not stored"}
        assert missing.json() == {"error": "document_not_found", "detail": "document 'only-nobody' is not stored"}

        assert http_a.delete("/v1/documents/report-0").json() == {"deleted": ["report-0"]}  # a's copy only
        b_ids = [d["doc_id"] for d in http_b.get("/v1/documents", params={"limit": 100}).json()["documents"]]
        assert "report-0" in b_ids and f"only-{b}" in b_ids and len(b_ids) == N_DOCS + 1
        again = http_a.post(
            "/v1/documents", json={"documents": [{"doc_id": "report-0", "text": text_of(a, 0)}], "collection": a}
        )
        assert again.json()["added"] == 1


def wait_done(http: httpx.Client, url: str) -> dict[str, Any]:
    deadline = time.monotonic() + JOB_DONE_WITHIN_S
    while time.monotonic() < deadline:
        job = http.get(url).json()
        if job["status"] in ("done", "failed"):
            return dict(job)
        time.sleep(0.3)
    raise AssertionError(f"job not finished within {JOB_DONE_WITHIN_S} s: {job}")


def test_jobs_belong_to_their_collection(server: RagServe, stored: dict[str, str]) -> None:
    a, b = TENANTS
    with client(server, stored[a]) as http_a, client(server, stored[b]) as http_b:
        files = {"files": ("upload.md", b"# Upload\n\nThe lemur calls at dusk were counted by the tenant-b team.\n")}
        refused = http_b.post("/v1/documents/files", files=files, data={"collection": a})
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden_collection"
        accepted = http_b.post("/v1/documents/files", files=files, data={"collection": b})
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["job_id"]
        assert accepted.json()["collection"] == b
        job = wait_done(http_b, f"/v1/jobs/{job_id}")
        assert job["status"] == "done" and job["collection"] == b and job["chunks"] >= 1, job

        outside = http_a.get(f"/v1/jobs/{job_id}")
        missing = http_a.get(f"/v1/jobs/{job_id + 1000}")
        assert outside.status_code == missing.status_code == 404
        assert outside.json() == {"error": "not_found", "detail": f"no job {job_id}"}
        assert missing.json() == {"error": "not_found", "detail": f"no job {job_id + 1000}"}
        assert job_id not in [j["id"] for j in http_a.get("/v1/jobs").json()["jobs"]]
        assert job_id in [j["id"] for j in http_b.get("/v1/jobs").json()["jobs"]]
        b_ids = [d["doc_id"] for d in http_b.get("/v1/documents", params={"limit": 100}).json()["documents"]]
        assert "upload.md" in b_ids
        a_ids = [d["doc_id"] for d in http_a.get("/v1/documents", params={"limit": 100}).json()["documents"]]
        assert "upload.md" not in a_ids


def test_revoked_key_is_refused(settings: Settings, fresh_db: str, server: RagServe) -> None:
    made = run_cli(
        settings, "keys", "create", "--collections", "tenant-c", "--json", extra_env={"DATABASE_URL": fresh_db}
    )
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    with client(server, key["token"]) as http:
        assert http.get("/v1/documents").json() == {"documents": [], "total": 0, "next_cursor": None}
        revoked = run_cli(settings, "keys", "revoke", str(key["id"]), extra_env={"DATABASE_URL": fresh_db})
        assert revoked.returncode == 0 and f"revoked key {key['id']}" in revoked.stdout, revoked.stderr
        response = http.get("/v1/documents")
        assert response.status_code == 401 and response.json()["error"] == "unauthorized"
    unknown = run_cli(settings, "keys", "revoke", "999", extra_env={"DATABASE_URL": fresh_db})
    assert unknown.returncode == 1 and "no key 999" in unknown.stderr


def test_the_cli_ingests_lists_and_queues_into_a_collection(
    settings: Settings, fresh_db: str, server: RagServe, stored: dict[str, str], tmp_path: Path
) -> None:
    a, b = TENANTS
    env = {"DATABASE_URL": fresh_db}
    note = tmp_path / "cli-note.md"
    note.write_text("# CLI note\n\nThe okapi habitat survey was filed from the command line.\n")
    ingested = run_cli(settings, "ingest", str(note), "--collection", b, "--json", extra_env=env)
    assert ingested.returncode == 0 and json.loads(ingested.stdout)["added"] == 1, ingested.stderr
    bad = run_cli(settings, "ingest", str(note), "--collection", "Bad Name", extra_env=env)
    assert bad.returncode == 1 and "collection 'Bad Name'" in bad.stderr and "Traceback" not in bad.stderr

    listed = run_cli(settings, "docs", "list", "--json", "--collection", b, extra_env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {r["collection"] for r in rows} == {b} and "cli-note.md" in {r["doc_id"] for r in rows}
    with client(server, stored[a]) as http_a, client(server, stored[b]) as http_b:
        assert "cli-note.md" in [d["doc_id"] for d in http_b.get("/v1/documents").json()["documents"]]
        assert "cli-note.md" not in [d["doc_id"] for d in http_a.get("/v1/documents").json()["documents"]]

        queued = run_cli(settings, "jobs", "submit", str(note), "--collection", a, "--json", extra_env=env)
        assert queued.returncode == 0, queued.stderr
        job_id = json.loads(queued.stdout)["job_id"]
        assert http_b.get(f"/v1/jobs/{job_id}").status_code == 404
        job = wait_done(http_a, f"/v1/jobs/{job_id}")
        assert job["status"] == "done" and job["collection"] == a, job
        assert "cli-note.md" in [d["doc_id"] for d in http_a.get("/v1/documents").json()["documents"]]

        restricted = tmp_path / "cli-restricted.md"
        restricted.write_text("# Restricted\n\nThe okapi census for the engineering group only.\n")
        queued = run_cli(
            settings, "jobs", "submit", str(restricted), "--collection", a, "--groups", "eng", "--json", extra_env=env
        )
        assert queued.returncode == 0, queued.stderr
        job = wait_done(http_a, f"/v1/jobs/{json.loads(queued.stdout)['job_id']}")
        assert job["status"] == "done" and job["params"] == {"groups": ["eng"]}, job
        # the key has no group: it reads the public documents of its collections, not the engineering group's
        assert "cli-restricted.md" not in [d["doc_id"] for d in http_a.get("/v1/documents").json()["documents"]]
    deleted = run_cli(settings, "docs", "delete", "cli-note.md", "--collection", a, "--json", extra_env=env)
    assert json.loads(deleted.stdout) == {"deleted": ["cli-note.md"], "not_found": []}, deleted.stderr
    left = json.loads(run_cli(settings, "docs", "list", "--json", extra_env=env).stdout)
    assert [r["collection"] for r in left if r["doc_id"] == "cli-note.md"] == [b]


ASKS = 200
"""Questions asked in all, alternating tenants; each retrieves 5 passages from 2 x (N_DOCS + 1) near-duplicates."""


def test_answers_never_see_or_cite_the_other_tenant(
    server: RagServe, stored: dict[str, str], fake_llm: FakeOpenAIServer
) -> None:
    prompts = fake_llm.reset()
    with client(server, stored[TENANTS[0]]) as http_a, client(server, stored[TENANTS[1]]) as http_b:
        for n in range(ASKS):
            tenant, other = TENANTS[n % 2], TENANTS[1 - n % 2]
            http = (http_a, http_b)[n % 2]
            topic = TOPICS[n % len(TOPICS)]
            question = f"What did the {other} team record about the {topic} in field report {n % N_DOCS}?"
            if n % 10 == 9:  # the stream carries the same result
                response = http.post("/v1/ask/stream", json={"question": question, "top_k": 5})
                assert response.status_code == 200, response.text
                results = [e for e in sse_events(response) if e[0] == "result"]
                assert len(results) == 1, response.text
                body = results[0][1]
            else:
                response = http.post("/v1/ask", json={"question": question, "top_k": 5})
                assert response.status_code == 200, response.text
                body = response.json()
            assert body["citations"], body
            for citation in body["citations"]:
                assert citation["chunk_id"].startswith(f"{tenant}::"), (tenant, citation)
            prompt = json.dumps(prompts[-1]["messages"])  # the passages retrieved for the answer
            assert f"recorded by the {tenant} team" in prompt
            assert f"recorded by the {other} team" not in prompt and f"only the {other}" not in prompt
    assert len(prompts) == ASKS


CHATS = 20
"""Chat completions asked in all (every fifth streamed), alternating tenants."""


def prompt_sees_only(prompt: dict[str, Any], tenant: str, other: str) -> None:
    """The LLM request `prompt` carries passages of `tenant` and none of `other`."""
    sent = json.dumps(prompt["messages"])
    assert f"recorded by the {tenant} team" in sent
    assert f"recorded by the {other} team" not in sent and f"only the {other}" not in sent


def test_chat_completions_never_see_or_cite_the_other_tenant(
    server: RagServe, stored: dict[str, str], fake_llm: FakeOpenAIServer
) -> None:
    prompts = fake_llm.reset()
    sdks = [openai.OpenAI(base_url=server.url + "/v1", api_key=stored[t], max_retries=0, timeout=120) for t in TENANTS]
    for n in range(CHATS):
        tenant, other = TENANTS[n % 2], TENANTS[1 - n % 2]
        topic = TOPICS[n % len(TOPICS)]
        question = f"What did the {other} team record about the {topic} in field report {n % N_DOCS}?"
        messages: list[Any] = [{"role": "user", "content": question}]
        if n % 5 == 4:
            chunks = list(sdks[n % 2].chat.completions.create(model="triton-rag", messages=messages, stream=True))
            extras = [c.model_extra or {} for c in chunks]
            citations = next(e["citations"] for e in extras if e.get("citations") is not None)
        else:
            completion = sdks[n % 2].chat.completions.create(model="triton-rag", messages=messages)
            assert completion.model_extra is not None
            citations = completion.model_extra["citations"]
        assert citations
        assert all(c["chunk_id"].startswith(f"{tenant}::") for c in citations), (tenant, citations)
        prompt_sees_only(prompts[-1], tenant, other)
    assert len(prompts) == CHATS
    with pytest.raises(openai.PermissionDeniedError, match=f"collection '{TENANTS[1]}'") as refused:
        sdks[0].chat.completions.create(
            model="triton-rag", messages=[{"role": "user", "content": "zebra"}], extra_body={"collection": TENANTS[1]}
        )
    assert refused.value.code == "forbidden_collection" and len(prompts) == CHATS
    assert [m.id for m in sdks[1].models.list()] == ["triton-rag", "triton-rag-always", "triton-rag-agentic"]


MCP_SEARCHES = 10
"""`search` calls per tenant over MCP (plus two `ask` calls each)."""


async def test_mcp_tools_never_see_or_cite_the_other_tenant(
    server: RagServe, stored: dict[str, str], fake_llm: FakeOpenAIServer
) -> None:
    prompts = fake_llm.reset()
    for tenant, other in (TENANTS, TENANTS[::-1]):
        headers = {"Authorization": f"Bearer {stored[tenant]}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            Client(streamable_http_client(server.url + "/mcp", http_client=http)) as mcp,
        ):
            for n in range(MCP_SEARCHES):
                topic = TOPICS[n % len(TOPICS)]
                query = f"{other} team {topic} field report {n}"
                found = await mcp.call_tool("search", {"query": query, "top_k": 10})
                assert not found.is_error and found.structured_content is not None, found
                passages = found.structured_content["passages"]
                assert passages and all(p["chunk_id"].startswith(f"{tenant}::") for p in passages), passages
                assert all(other not in p["text"] for p in passages), passages
            for n in range(2):
                asked = await mcp.call_tool("ask", {"question": f"What did the {other} team record in report {n}?"})
                assert not asked.is_error and asked.structured_content is not None, asked
                citations = asked.structured_content["citations"]
                assert citations and all(c["chunk_id"].startswith(f"{tenant}::") for c in citations), citations
                prompt_sees_only(prompts[-1], tenant, other)
            theirs = await mcp.call_tool("get_document", {"doc_id": f"only-{other}"})
            missing = await mcp.call_tool("get_document", {"doc_id": "only-nobody"})
            mine = await mcp.call_tool("get_document", {"doc_id": f"only-{tenant}"})
            named = await mcp.call_tool("search", {"query": "zebra", "collection": other})
        texts = [r.content[0].text for r in (theirs, missing, named)]  # type: ignore[union-attr]
        assert theirs.is_error and missing.is_error and named.is_error and not mine.is_error
        assert texts[0].replace(f"only-{other}", "<id>") == texts[1].replace("only-nobody", "<id>")
        assert "forbidden_collection" in texts[2] and f"'{other}'" in texts[2]
        assert mine.structured_content is not None and tenant in mine.structured_content["text"]
    assert len(prompts) == 4


def test_conversations_belong_to_their_key(
    server: RagServe, stored: dict[str, str], fake_llm: FakeOpenAIServer
) -> None:
    a, b = TENANTS
    prompts = fake_llm.reset()
    with client(server, stored[a]) as http_a, client(server, stored[b]) as http_b:
        mine = http_a.post("/v1/conversations", json={"title": "a's"}).json()["id"]
        for question in (f"What did the {b} team record about zebra migration?", "and in report 3?"):
            asked = http_a.post("/v1/ask", json={"question": question, "conversation_id": mine})
            assert asked.status_code == 200 and asked.json()["conversation_id"] == mine, asked.text
            prompt_sees_only(prompts[-1], a, b)
        read = http_a.get(f"/v1/conversations/{mine}").json()
        assert read["turn_count"] == 2
        cited = [c["chunk_id"] for t in read["turns"] for c in t["citations"]]
        assert cited and all(chunk.startswith(f"{a}::") for chunk in cited), cited
        assert [c["id"] for c in http_a.get("/v1/conversations").json()["conversations"]] == [mine]
        assert http_b.get("/v1/conversations").json() == {"conversations": [], "total": 0, "next_cursor": None}

        missing = str(uuid4())
        requests = (
            ("GET", "/v1/conversations/{}", None),
            ("DELETE", "/v1/conversations/{}", None),
            ("POST", "/v1/ask", {"question": "zebra"}),
            ("POST", "/v1/ask/stream", {"question": "zebra"}),
        )
        for method, path, body in requests:
            answers = [
                http_b.request(method, path.format(cid), json=None if body is None else body | {"conversation_id": cid})
                for cid in (mine, missing)
            ]
            assert [r.status_code for r in answers] == [404, 404], [r.text for r in answers]
            theirs, nobody = (r.json() for r in answers)
            assert theirs == {"error": "conversation_not_found", "detail": nobody["detail"].replace(missing, mine)}
        assert http_a.get(f"/v1/conversations/{mine}").json()["turn_count"] == 2  # b stored and deleted nothing
        assert http_a.delete(f"/v1/conversations/{mine}").json() == {"deleted": mine}
    assert len(prompts) == 2
