"""`/a2a` of the `rag serve` app (in-process, over the in-memory documents and a scripted model), driven by the
official A2A client (`a2a-sdk`): the agent card, answers with citations, API keys and their collections, quotas,
admission control and the body limit."""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers.proto_helpers import get_data_parts, get_text_parts
from a2a.types import CancelTaskRequest, GetTaskRequest, TaskState
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.function import FunctionModel

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.keys import InMemoryKeys
from agent.core.quotas import InMemoryUsage, QuotaMetrics, Quotas
from agent.core.wiring import Services
from agent.http import create_app
from agent.http.deps import app_state
from infra.threaded_server import ThreadedServer
from tests.a2a_rig import ask, question, served
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.scripted_model import ScriptedModel as Model
from tools.in_memory import InMemoryCollection
from tools.ingest import SourceDocument
from tools.store.usage import total

ADMIN_KEY = "admin-secret"
SECRET = SourceDocument("b12-other", "Vitamin B12 (other team)", "Vitamin B12 deficiency raises homocysteine.", "o", {})
"""A near-duplicate of `b12` in the collection `other`, which the tenants' keys do not hold."""

CARD_PATHS = ("/.well-known/agent-card.json", "/a2a/.well-known/agent-card.json")


async def keyed_app(model: Model | None = None, **update: Any) -> FastAPI:
    """The app with `API_KEY` set over `DOCUMENTS` in `default` and `SECRET` in `other`."""
    settings = Settings.model_validate({"refusal_min_score": 0.3, "api_key": ADMIN_KEY} | update)
    collection = InMemoryCollection(DOCUMENTS)
    await collection.add_documents([SECRET], "other")
    model = model or Model()
    rag = RagApp(settings, Services(collection, collection, FunctionModel(stream_function=model.stream)))
    return create_app(settings, rag)


async def test_the_agent_card_is_served_without_a_key_and_names_bearer_auth() -> None:
    async with served(await keyed_app()) as http:
        cards = [await http.get(path) for path in CARD_PATHS]
        resolved = await A2ACardResolver(http, "http://localhost/a2a").get_agent_card()
    for response in cards:
        assert response.status_code == 200, response.text
        card = response.json()
        assert card["supportedInterfaces"] == [
            {"protocolBinding": "JSONRPC", "url": "http://localhost/a2a", "protocolVersion": "1.0"}
        ]
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
        assert card["securityRequirements"] == [{"schemes": {"bearer": []}}]
        assert [skill["id"] for skill in card["skills"]] == ["answer"]
    assert resolved.name == "triton-rag" and resolved.capabilities.streaming
    assert list(resolved.security_schemes) == ["bearer"]


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_question_is_answered_with_its_citations_as_text_and_data(streaming: bool) -> None:
    async with served(await keyed_app()) as http:
        outcome = await ask(http, ADMIN_KEY, COVERED, {"collection": "default"}, streaming=streaming)
    assert outcome.state == TaskState.TASK_STATE_COMPLETED, outcome
    if streaming:
        assert outcome.states[1:] == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]
    text, data = outcome.answer()
    assert text.startswith("It does [1].") and "Sources:\n[1] Vitamin B12 (doc_id b12" in text
    assert data["answer"] == "It does [1]." and data["refused"] is False and data["support"] is None
    assert [c["doc_id"] for c in data["citations"]] == ["b12"] and data["citations"][0]["passage"] == 1


async def test_a_finished_task_is_read_back_by_its_caller_only() -> None:
    keys = InMemoryKeys()
    _, mine = await keys.create(["default"])
    _, theirs = await keys.create(["default"])
    async with served(await keyed_app(), keys) as http:
        outcome = await ask(http, mine, COVERED, streaming=False)
        request = GetTaskRequest(id=outcome.task_id)
        config = ClientConfig(httpx_client=http)
        again = await (await create_client("http://localhost/a2a", config)).get_task(request)
        http.headers["Authorization"] = f"Bearer {theirs}"
        with pytest.raises(Exception, match=r"(?i)task not found"):
            await (await create_client("http://localhost/a2a", config)).get_task(request)
        http.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        admin = await (await create_client("http://localhost/a2a", config)).get_task(request)
    assert again.status.state == admin.status.state == TaskState.TASK_STATE_COMPLETED
    assert [a.name for a in again.artifacts] == ["answer"]


@pytest.mark.parametrize("sent", [None, "wrong", "rag_made-up"])
async def test_a_missing_or_wrong_key_is_401_before_the_body_is_read(sent: str | None) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}
    headers = {"Authorization": f"Bearer {sent}"} if sent else {}
    async with served(await keyed_app(), InMemoryKeys()) as http:
        response = await http.post("/a2a", json=body, headers=headers)
        with pytest.raises(Exception, match="401"):
            await ask(http, sent or "", COVERED)
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert response.json() == {"error": "unauthorized", "detail": "missing, wrong or revoked API key"}


async def test_a_key_holder_searches_only_its_collections_and_naming_another_rejects_the_task() -> None:
    keys = InMemoryKeys()
    _, token = await keys.create(["default"])
    async with served(await keyed_app(), keys) as http:
        outcome = await ask(http, token, COVERED, {"top_k": 10})
        other = await ask(http, token, COVERED, {"collection": "other"})
        http.headers["Authorization"] = f"Bearer {ADMIN_KEY}"
        admin = await ask(http, ADMIN_KEY, COVERED, {"collection": "other"})
    _, data = outcome.answer()
    assert {c["doc_id"] for c in data["citations"]} <= {d.doc_id for d in DOCUMENTS}
    assert other.state == TaskState.TASK_STATE_REJECTED and not other.artifacts
    assert other.error["error"] == "forbidden_collection" and "'other'" in other.error_text
    assert [c["doc_id"] for c in admin.answer()[1]["citations"]] == ["b12-other"]


async def test_a_key_over_its_quota_gets_a_rejected_task_with_a_retryable_error() -> None:
    keys, usage = InMemoryKeys(), InMemoryUsage()
    key, token = await keys.create(["default"], requests_per_minute=2)
    quotas = Quotas(Settings.model_validate({}), usage, QuotaMetrics.create(CollectorRegistry()))
    async with served(await keyed_app(), keys, quotas) as http:
        outcomes = [await ask(http, token, COVERED, streaming=streaming) for streaming in (True, False, True)]
    assert [o.state for o in outcomes] == [TaskState.TASK_STATE_COMPLETED] * 2 + [TaskState.TASK_STATE_REJECTED]
    error = outcomes[2].error
    assert error["error"] == "quota_exceeded" and error["retryable"] is True and error["retry_after_s"] > 0
    assert outcomes[2].error_text.startswith("quota_exceeded: ") and outcomes[2].error_text.endswith("(retryable)")
    used = total(await usage.report(date(2000, 1, 1), key.id))
    assert used.requests == 2 and used.completion_tokens > 0  # the answers' tokens; the card and refusal: none


async def test_an_overloaded_service_rejects_the_task_with_a_retryable_error() -> None:
    model = Model()
    model.gate = asyncio.Event()
    app = await keyed_app(model, answer_max_in_progress=1, answer_queue_max=0)
    async with served(app) as http:
        holder = asyncio.create_task(ask(http, ADMIN_KEY, COVERED))
        await asyncio.wait_for(model.started.wait(), 30)
        refused = await ask(http, ADMIN_KEY, COVERED)
        model.gate.set()
        held = await holder
    assert held.state == TaskState.TASK_STATE_COMPLETED
    assert refused.state == TaskState.TASK_STATE_REJECTED and not refused.artifacts
    assert refused.error["error"] == "overloaded" and refused.error["retryable"] is True
    assert "ANSWER_MAX_IN_PROGRESS=1" in refused.error_text and refused.error_text.endswith("(retryable)")


async def test_a_failed_answer_is_a_failed_task_with_the_message() -> None:
    model = Model()
    model.error = ModelHTTPError(500, "fake", "boom")
    async with served(await keyed_app(model)) as http:
        outcome = await ask(http, ADMIN_KEY, COVERED)
    assert outcome.state == TaskState.TASK_STATE_FAILED and not outcome.artifacts
    assert outcome.error["error"] == "llm_unavailable" and outcome.error["retryable"] is True


async def test_a_message_without_text_rejects_the_task_naming_the_input() -> None:
    async with served(await keyed_app()) as http:
        outcome = await ask(http, ADMIN_KEY, " ", {"top_k": 0})
    assert outcome.state == TaskState.TASK_STATE_REJECTED and outcome.error["error"] == "bad_request"


async def test_the_body_limit_and_post_only_apply_to_a2a() -> None:
    app = await keyed_app(max_body_bytes=1000)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"parts": [{"text": "x" * 2000}]}},
    }
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with served(app) as http:
        large = await http.post("/a2a", json=body, headers=headers)
        get = await http.get("/a2a", headers=headers)
    assert large.status_code == 413 and large.json()["error"] == "payload_too_large"
    assert get.status_code == 405 and get.headers["allow"] == "POST" and get.json()["error"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", -32700),
        (b"{}", -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "Nope", "params": {}}', -32601),
    ],
)
async def test_a_request_that_is_not_a2a_is_a_jsonrpc_error_not_a_crash(body: bytes, code: int) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
    async with served(await keyed_app()) as http:
        response = await http.post("/a2a", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["error"]["code"] == code and response.json()["error"]["data"]["detail"]


async def test_the_documented_client_example_works_against_a_real_server() -> None:
    """The example of docs/a2a.md, over a socket to the app under uvicorn: the card's URL is the address the client
    used, and the streamed artifact carries the answer and its citations."""
    with ThreadedServer(await keyed_app()) as server:
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        async with httpx.AsyncClient(headers=headers, timeout=120) as http:
            client = await create_client(f"{server.url}/a2a", ClientConfig(httpx_client=http))
            texts, citations = [], []
            async for event in client.send_message(question(COVERED, {"collection": "default"})):
                if event.HasField("artifact_update"):
                    parts = list(event.artifact_update.artifact.parts)
                    texts += get_text_parts(parts)
                    citations += get_data_parts(parts)[0]["citations"]
            card = (await http.get(f"{server.url}/.well-known/agent-card.json")).json()
    assert card["supportedInterfaces"][0]["url"] == f"{server.url}/a2a"
    assert texts[0].startswith("It does [1].") and [c["doc_id"] for c in citations] == ["b12"]


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_task_cut_by_the_shutdown_drain_fails_with_a_retryable_error(streaming: bool) -> None:
    model = Model()
    model.gate = asyncio.Event()  # the model never writes: only the drain's end stops the answer
    app = await keyed_app(model)
    async with served(app) as http:
        call = asyncio.create_task(ask(http, ADMIN_KEY, COVERED, streaming=streaming))
        await asyncio.wait_for(model.started.wait(), 30)
        drain = app_state(app).drain
        drain.begin(0.0)
        drain.cut()
        outcome = await asyncio.wait_for(call, 30)
    assert model.cancelled  # the answer stopped: no LLM left working for nobody
    assert outcome.state == TaskState.TASK_STATE_FAILED and not outcome.artifacts
    assert outcome.error["error"] == "shutting_down" and outcome.error["retryable"] is True


async def test_a_task_is_canceled_by_its_caller_only() -> None:
    """Over a real server (httpx's in-process transport gives a response only once it has ended)."""
    model = Model()
    model.gate = asyncio.Event()  # the answer runs until canceled
    keys = InMemoryKeys()
    _, mine = await keys.create(["default"])
    _, theirs = await keys.create(["default"])
    app = await keyed_app(model)
    with ThreadedServer(app) as server:
        app_state(app).keys = keys  # after the lifespan, which brings no keys here
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {mine}"}, timeout=60) as http,
            httpx.AsyncClient(headers={"Authorization": f"Bearer {theirs}"}, timeout=60) as other,
        ):
            client = await create_client(f"{server.url}/a2a", ClientConfig(httpx_client=http))
            events = client.send_message(question(COVERED))
            task_id = (await asyncio.wait_for(anext(events), 30)).task.id
            async with asyncio.timeout(60):  # bounded: a model that never starts fails here, not at pytest's limit
                while not model.started.is_set():  # noqa: ASYNC110 - set in the server's thread and loop: polled
                    await asyncio.sleep(0.01)
            with pytest.raises(Exception, match=r"(?i)task not found"):
                stranger = await create_client(f"{server.url}/a2a", ClientConfig(httpx_client=other))
                await stranger.cancel_task(CancelTaskRequest(id=task_id))
            assert not model.cancelled
            await client.cancel_task(CancelTaskRequest(id=task_id))
            states = [event.status_update.status.state async for event in events if event.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_CANCELED and model.cancelled
