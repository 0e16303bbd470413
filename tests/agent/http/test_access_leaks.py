"""Permissions per document hold on every read route: a randomized test over users, groups, documents and routes.

One `rag serve` (real Postgres with its row-level security, real Triton, a fake LLM that records every prompt, the
real OpenID Connect provider `oidc-provider-mock`). Each document carries random groups (none: public) and one
codeword of its own; each principal is a signed-in user in random groups (the provider's ID token) or the holder of
an API key tied to one group. A case is one (principal, route, document) judgement: the document is seen iff its
groups meet the principal's, and a document it may not read looks exactly like a missing one. Routes: the listing and
its totals, the collection counts, MCP `get_document` and `search`, `/v1/ask`, `/v1/ask/stream`, the
OpenAI-compatible route, MCP `ask`, the page image, a conversation's turns after a document's groups change, and an
answer cache hit. The LLM's prompts are the strongest check: a passage that reached the model was read.

Size: `RAG_LEAK_PRINCIPALS` (default 8) x `RAG_LEAK_DOCS` (default 24) with the fixed seed `RAG_LEAK_SEED`; the
full size (>= 10,000 cases: `RAG_LEAK_PRINCIPALS=20 RAG_LEAK_DOCS=100`) is the benchmark run docs/access.md gives.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agent.config.settings import Settings
from tests.conftest import REPO_ROOT, run_cli
from tests.fake_openai import FakeOpenAIServer
from tests.http_server import RagServe, sse_events
from tests.oidc_issuer import Provider, running_provider
from tests.store_helpers import scratch_databases
from tools.access import PUBLIC_GROUP

SEED = int(os.environ.get("RAG_LEAK_SEED", "20261205"))
N_PRINCIPALS = int(os.environ.get("RAG_LEAK_PRINCIPALS", "8"))
N_DOCS = int(os.environ.get("RAG_LEAK_DOCS", "24"))
GROUPS = ("eng", "ops", "hr", "legal", "sales", "/org/finance")
"""Group names; one is a Keycloak-style path."""
ADMIN_KEY = "leak-test-admin-key"
CLIENT_ID = "rag"
ASKS_PER_PRINCIPAL = 3
"""Documents each principal asks about over `/v1/ask`; the stream, the OpenAI route and MCP `ask` take one each."""

pytestmark = pytest.mark.stack


@dataclass(frozen=True)
class Document:
    doc_id: str
    codeword: str
    groups: tuple[str, ...]

    @property
    def text(self) -> str:
        return f"Field note {self.doc_id}: the codeword {self.codeword} marks this note about a quiet survey."


@dataclass
class Principal:
    name: str
    groups: frozenset[str]
    token: str = ""

    def reads(self, doc: Document) -> bool:
        """The rule the store must enforce: the document's groups meet the principal's (public: everyone)."""
        return bool(set(doc.groups or (PUBLIC_GROUP,)) & (self.groups | {PUBLIC_GROUP}))


@dataclass
class Tally:
    """Cases judged and leaks (a document seen that may not be read, or denied distinguishable from missing)."""

    cases: int = 0
    leaks: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)
    """Documents a principal may read but did not see where it must (listing, get_document): over-restriction."""

    def judge(self, leaked: bool, what: str) -> None:
        self.cases += 1
        if leaked:
            self.leaks.append(what)


RNG = random.Random(SEED)
DOCS = [
    Document(
        f"note-{i:04d}", f"kw{RNG.randrange(36**6):06x}{i}", tuple(sorted(RNG.sample(GROUPS, RNG.choice((0, 1, 1, 2)))))
    )
    for i in range(N_DOCS)
]
PRINCIPALS = [
    Principal(f"user{j}", frozenset(RNG.sample(GROUPS, RNG.choice((0, 1, 2, 3))))) for j in range(N_PRINCIPALS - 2)
] + [Principal(f"key{j}", frozenset({GROUPS[j]})) for j in range(2)]
TALLY = Tally()


def passages_in(text: str) -> list[Document]:
    """The documents whose passage text (`Document.text`'s opening, which no question holds) is in `text`."""
    return [d for d in DOCS if f"Field note {d.doc_id}:" in text]


@pytest.fixture(scope="module")
async def fresh_db(postgres_url: str) -> AsyncIterator[str]:
    async with scratch_databases(postgres_url, "leaks") as (url,):
        yield url


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture(scope="module")
def provider(server_root: Path) -> Iterator[Provider]:
    users = [{"sub": p.name, "groups": sorted(p.groups)} for p in PRINCIPALS if p.name.startswith("user")]
    with running_provider(server_root / "oidc-leaks", users) as running:
        yield running


@pytest.fixture(scope="module")
def server(
    triton_server: Settings, fresh_db: str, fake_llm: FakeOpenAIServer, provider: Provider
) -> Iterator[RagServe]:
    env = {
        "DATABASE_URL": fresh_db,
        "MODEL_REPOSITORY": str(REPO_ROOT / "model_repository"),
        "LLM_BASE_URL": fake_llm.base_url,
        "VLLM_PORT": str(fake_llm.port),
        "LLM_MODEL": "fake",
        "LLM_MAX_RETRIES": "0",
        "REFUSAL_MIN_SCORE": "0",
        "AGENT_POLICY": "always",
        "SUPPORT_CHECK": "off",
        "ANSWER_CACHE": "true",
        "API_KEY": ADMIN_KEY,
        "API_KEYS_CACHE_S": "0",
        "OIDC_ISSUER": provider.issuer,
        "OIDC_CLIENT_ID": CLIENT_ID,
    }
    with RagServe(triton_server, env) as served:
        yield served


def client(server: RagServe, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


@pytest.fixture(scope="module")
def principals(settings: Settings, fresh_db: str, server: RagServe, provider: Provider) -> list[Principal]:
    """Documents stored by the admin with their groups, everyone granted reader on `default`, every principal's
    token."""
    with client(server, ADMIN_KEY) as admin:
        body = {"documents": [{"doc_id": d.doc_id, "text": d.text, "groups": list(d.groups)} for d in DOCS]}
        added = admin.post("/v1/documents", json=body)
        assert added.status_code == 201 and added.json()["added"] == N_DOCS, added.text
        granted = admin.put(
            "/v1/access/grants", json={"group": PUBLIC_GROUP, "collection": "default", "role": "reader"}
        )
        assert granted.status_code in (200, 201), granted.text
    for p in PRINCIPALS:
        if p.name.startswith("user"):
            p.token = provider.id_token(p.name, client_id=CLIENT_ID)
        else:
            (group,) = p.groups
            made = run_cli(
                settings,
                "keys",
                "create",
                "--name",
                p.name,
                "--group",
                group,
                "--json",
                extra_env={"DATABASE_URL": fresh_db},
            )
            assert made.returncode == 0, made.stderr
            p.token = json.loads(made.stdout)["token"]
    return PRINCIPALS


def check_prompt(p: Principal, prompt: dict[str, Any], route: str) -> None:
    """Every document whose passage reached the model is one `p` may read."""
    for doc in passages_in(json.dumps(prompt["messages"])):
        TALLY.judge(not p.reads(doc), f"{route}: {p.name} {sorted(p.groups)} -> {doc.doc_id} {doc.groups}")


def check_citations(p: Principal, citations: list[dict[str, Any]], route: str) -> None:
    docs = {d.doc_id: d for d in DOCS}
    for citation in citations:
        doc = docs[citation["doc_id"]]
        TALLY.judge(not p.reads(doc), f"{route} citation: {p.name} -> {doc.doc_id}")


def test_listings_and_counts_show_exactly_the_readable_documents(server: RagServe, principals: list[Principal]) -> None:
    for p in principals:
        with client(server, p.token) as http:
            listed = http.get("/v1/documents", params={"limit": 1000})
            assert listed.status_code == 200, listed.text
            seen = {d["doc_id"] for d in listed.json()["documents"]}
            readable = {d.doc_id for d in DOCS if p.reads(d)}
            for doc in DOCS:
                TALLY.judge(doc.doc_id in seen and not p.reads(doc), f"listing: {p.name} -> {doc.doc_id}")
            assert seen == readable, (p.name, sorted(seen ^ readable))
            assert listed.json()["total"] == len(readable)
            counts = http.get("/v1/collections").json()
            TALLY.judge(
                any(c["name"] == "default" and c["documents"] != len(readable) for c in counts["collections"]),
                f"collection counts: {p.name}",
            )
            missing = http.get("/v1/documents/no-such-note/pages/1")
            for doc in DOCS:
                page = http.get(f"/v1/documents/{doc.doc_id}/pages/1")
                if p.reads(doc):
                    assert page.json()["error"] != "document_not_found", page.text
                else:
                    same = page.status_code == missing.status_code and page.json()["error"] == missing.json()["error"]
                    TALLY.judge(not same, f"page image: {p.name} -> {doc.doc_id}: {page.text}")
    assert TALLY.leaks == []


async def test_mcp_reads_and_searches_only_readable_documents(server: RagServe, principals: list[Principal]) -> None:
    for p in principals:
        headers = {"Authorization": f"Bearer {p.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http,
            Client(streamable_http_client(server.url + "/mcp", http_client=http)) as mcp,
        ):
            missing = await mcp.call_tool("get_document", {"doc_id": "no-such-note"})
            missing_text = missing.content[0].text.replace("no-such-note", "<id>")  # type: ignore[union-attr]
            for doc in DOCS:
                read = await mcp.call_tool("get_document", {"doc_id": doc.doc_id})
                if p.reads(doc):
                    assert not read.is_error and read.structured_content is not None, read
                    assert doc.codeword in read.structured_content["text"], read
                    TALLY.judge(False, "get_document")
                else:
                    text = read.content[0].text.replace(doc.doc_id, "<id>")  # type: ignore[union-attr]
                    TALLY.judge(not (read.is_error and text == missing_text), f"get_document: {p.name} -> {doc.doc_id}")
                found = await mcp.call_tool("search", {"query": f"codeword {doc.codeword}", "top_k": 5})
                assert not found.is_error and found.structured_content is not None, found
                hits = {h["doc_id"] for h in found.structured_content["passages"]}
                for hit in hits:
                    hit_doc = next(d for d in DOCS if d.doc_id == hit)
                    TALLY.judge(not p.reads(hit_doc), f"search: {p.name} -> {hit}")
                if p.reads(doc):
                    assert doc.doc_id in hits, (p.name, doc.doc_id, hits)
    assert TALLY.leaks == []


def test_answers_see_and_cite_only_readable_passages(
    server: RagServe, principals: list[Principal], fake_llm: FakeOpenAIServer
) -> None:
    rng = random.Random(SEED + 1)
    prompts = fake_llm.reset()
    for p in principals:
        asked = rng.sample(DOCS, ASKS_PER_PRINCIPAL + 2)
        with client(server, p.token) as http:
            for n, doc in enumerate(asked):
                question = f"What does the note with codeword {doc.codeword} say? ({p.name} {n})"
                if n == ASKS_PER_PRINCIPAL:
                    response = http.post("/v1/ask/stream", json={"question": question, "top_k": 5})
                    body = next(e[1] for e in sse_events(response) if e[0] == "result")
                    route = "stream"
                elif n == ASKS_PER_PRINCIPAL + 1:
                    response = http.post(
                        "/v1/chat/completions",
                        json={"model": "triton-rag", "messages": [{"role": "user", "content": question}]},
                    )
                    assert response.status_code == 200, response.text
                    body = response.json()
                    route = "openai"
                else:
                    response = http.post("/v1/ask", json={"question": question, "top_k": 5})
                    assert response.status_code == 200, response.text
                    body = response.json()
                    route = "ask"
                check_citations(p, body.get("citations") or [], route)
                if body.get("cached"):
                    continue
                check_prompt(p, prompts[-1], route)
                if p.reads(doc):  # the note asked about is found (the restriction does not starve the search)
                    assert doc in passages_in(json.dumps(prompts[-1]["messages"])), (p.name, doc.doc_id)
    assert TALLY.leaks == []


def test_a_cached_answer_is_never_served_to_another_permission_set(
    server: RagServe, principals: list[Principal], fake_llm: FakeOpenAIServer
) -> None:
    prompts = fake_llm.reset()
    for doc in DOCS[:8]:
        readers = [p for p in principals if p.reads(doc)]
        others = [p for p in principals if not p.reads(doc)]
        if not readers or not others:
            continue
        question = f"Which survey does the codeword {doc.codeword} mark?"
        with client(server, readers[0].token) as http:
            first = http.post("/v1/ask", json={"question": question, "top_k": 5}).json()
            again = http.post("/v1/ask", json={"question": question, "top_k": 5}).json()
        assert again.get("cached") is True, again
        with client(server, others[0].token) as http:
            theirs = http.post("/v1/ask", json={"question": question, "top_k": 5}).json()
        TALLY.judge(theirs.get("cached") is True, f"cache: {others[0].name} got {readers[0].name}'s answer")
        check_citations(others[0], theirs.get("citations") or [], "after cache")
        assert any(c["doc_id"] == doc.doc_id for c in first["citations"]), first
    assert prompts and TALLY.leaks == []


def test_changed_groups_hold_on_listings_and_conversations(
    server: RagServe, principals: list[Principal], fake_llm: FakeOpenAIServer
) -> None:
    """A conversation cites a document; the document's groups change; the turn's citation is no longer returned."""
    fake_llm.reset()
    reader = next(p for p in principals if p.name.startswith("user") and p.groups)
    group = sorted(reader.groups)[0]
    doc = next(d for d in DOCS if reader.reads(d) and d.groups)
    with client(server, reader.token) as http:
        conversation = http.post("/v1/conversations", json={"title": "leak"}).json()["id"]
        asked = http.post(
            "/v1/ask", json={"question": f"What does codeword {doc.codeword} mark?", "conversation_id": conversation}
        ).json()
        assert any(c["doc_id"] == doc.doc_id for c in asked["citations"]), asked
    hidden = next(g for g in GROUPS if g not in reader.groups)
    with client(server, ADMIN_KEY) as admin:
        changed = admin.put(f"/v1/documents/{doc.doc_id}/groups", json={"groups": [hidden]})
        assert changed.status_code == 200, changed.text
    with client(server, reader.token) as http:
        turns = http.get(f"/v1/conversations/{conversation}").json()["turns"]
        cited = [c["doc_id"] for t in turns for c in t["citations"]]
        TALLY.judge(
            doc.doc_id in cited, f"conversation: {reader.name} still sees {doc.doc_id} after its groups changed"
        )
        listed = {d["doc_id"] for d in http.get("/v1/documents", params={"limit": 1000}).json()["documents"]}
        TALLY.judge(doc.doc_id in listed, f"listing after change: {reader.name} -> {doc.doc_id}")
    assert group and TALLY.leaks == []


def test_the_tally(principals: list[Principal]) -> None:
    """The module's cases, reported (`-s` shows it); the benchmark size reaches >= 10,000."""
    print(
        f"\naccess leak test: seed {SEED}, {len(principals)} principals, {N_DOCS} documents, {TALLY.cases} cases, "
        f"{len(TALLY.leaks)} leaks"
    )
    assert TALLY.cases >= N_DOCS * len(principals) and TALLY.leaks == []
