"""The HTTP request contract in-process, without servers: the app of `rag serve` (`agent.http.create_app`) with its
`RagApp` swapped through `app.dependency_overrides` for one over the in-memory collection and a pydantic-ai
FunctionModel. Validation, error shapes and statuses, the API key, SSE framing, client disconnects, health, the
document routes. What needs a real process or the real stack: test_http_api.py, test_interfaces_stack.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, MutableMapping
from typing import Any
from uuid import UUID

import pytest
from pydantic import SecretStr
from pydantic_ai.exceptions import ModelHTTPError

from agent.core.errors import InputError
from tests.agent_corpus import COVERED, DOCUMENTS, OFF_TOPIC
from tests.http_rig import Served, assert_error, serve, sse_events


@pytest.fixture
def served() -> Iterator[Served]:
    yield serve()


async def test_ask_returns_the_typed_json_result(served: Served) -> None:
    async with served.client() as client:
        response = await client.post("/v1/ask", json={"question": COVERED, "top_k": 2})
    body = response.json()
    assert response.status_code == 200, body
    assert body["answer"] == "It does [1]." and body["refused"] is False and body["policy"] == "always"
    assert [c["doc_id"] for c in body["citations"]] == ["b12"] and body["searches"] == [COVERED]
    assert set(body) == {
        "answer",
        "citations",
        "answer_id",
        "dropped_citations",
        "timings_ms",
        "refused",
        "policy",
        "searches",
        "truncated",
        "dropped_passages",
        "cached",
        "support",
        "conversation_id",
    }
    assert body["conversation_id"] is None  # a one-off question: nothing stored
    assert str(UUID(body["answer_id"])) == body["answer_id"]  # what a rating refers to (POST /v1/feedback)
    assert set(body["timings_ms"]) == {"embed", "search", "llm", "llm_ttft", "total"}


async def test_off_topic_question_is_refused(served: Served) -> None:
    async with served.client() as client:
        body = (await client.post("/v1/ask", json={"question": OFF_TOPIC})).json()
    assert body["refused"] is True and body["citations"] == [] and not served.script.started.is_set()


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"question": ""}, "question"),
        ({"question": "   "}, "question is blank"),
        ({"question": "a\u0000b"}, "NUL"),
        ({"question": "q", "top_k": 0}, "top_k"),
        ({"question": "q", "top_k": 101}, "top_k"),
        ({"question": "q", "policy": "sometimes"}, "policy"),
        ({}, "question"),
    ],
)
async def test_bad_ask_input_is_a_422_naming_the_field(served: Served, body: dict[str, Any], needle: str) -> None:
    async with served.client() as client:
        for path in ("/v1/ask", "/v1/ask/stream"):
            assert_error(await client.post(path, json=body), 422, "bad_request", needle)
    assert not served.collection.searches


async def test_malformed_json_and_unknown_routes_have_the_error_shape(served: Served) -> None:
    async with served.client() as client:
        assert_error(await client.post("/v1/ask", content=b"{not json"), 422, "bad_request")
        assert_error(await client.get("/v1/nowhere"), 404, "not_found")
        assert_error(await client.get("/v1/ask"), 405, "method_not_allowed")


@pytest.mark.parametrize(
    ("error", "status", "kind", "retry_after"),
    [
        (ModelHTTPError(500, "fake", "boom"), 503, "llm_unavailable", True),
        (ModelHTTPError(400, "fake", "bad request"), 502, "llm_bad_response", False),
        (InputError("top_k=0; expected >= 1"), 422, "bad_request", False),
        (ValueError("a bug in our code"), 500, "internal_error", False),
        (KeyError("secret detail"), 500, "internal_error", False),
    ],
)
async def test_failures_map_to_statuses_and_one_body_shape(
    served: Served, error: Exception, status: int, kind: str, retry_after: bool
) -> None:
    served.script.error = error
    async with served.client() as client:
        response = await client.post("/v1/ask", json={"question": COVERED})
        stream = await client.post("/v1/ask/stream", json={"question": COVERED})
    assert_error(response, status, kind)
    assert ("retry-after" in response.headers) == retry_after
    assert "secret detail" not in response.text and "a bug in our code" not in response.text
    assert stream.status_code == 200 and sse_events(stream.text)[-1] == ("error", response.json())


async def test_answer_timeout_is_a_504() -> None:
    served = serve(answer_timeout_s=2.0)  # long enough to reach the model on a loaded machine; it never answers
    served.script.gate = asyncio.Event()  # never opens
    async with served.client() as client:
        response = await client.post("/v1/ask", json={"question": COVERED})
    assert_error(response, 504, "timeout", "ANSWER_TIMEOUT_S")
    assert "retry-after" not in response.headers  # Retry-After goes with a 503 only
    assert served.script.cancelled


async def test_stream_frames_tool_activity_text_then_the_result(served: Served) -> None:
    served.script.text = "Deficiency raises homocysteine [1]."
    async with served.client() as client:
        response = await client.post("/v1/ask/stream", json={"question": COVERED, "top_k": 2})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    names = [name for name, _ in events]
    assert names[:2] == ["tool_call", "tool_result"] and names[-1] == "result" and set(names[2:-1]) == {"text"}
    assert events[0][1] == {"type": "tool_call", "tool": "search_documents", "args": {"query": COVERED, "top_k": 2}}
    result = events[-1][1]
    assert "".join(data["text"] for name, data in events if name == "text") == result["answer"]
    assert result["answer"] == "Deficiency raises homocysteine [1]." and result["citations"][0]["doc_id"] == "b12"


async def test_closing_the_stream_cancels_the_answer(served: Served) -> None:
    served.script.gate = asyncio.Event()  # the model writes only when told to
    body = json.dumps({"question": COVERED}).encode()
    disconnect = asyncio.Event()
    sent: list[MutableMapping[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/ask/stream",
        "raw_path": b"/v1/ask/stream",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"rag"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("rag", 80),
    }
    call = asyncio.create_task(served.app(scope, receive, send))
    await asyncio.wait_for(served.script.started.wait(), 10)  # retrieval done, the model is writing
    disconnect.set()
    await asyncio.wait_for(call, 10)
    assert served.script.cancelled  # the answer stopped with the client
    chunks = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
    assert "event: tool_call" in chunks and "event: result" not in chunks


async def test_api_key_guards_every_route_but_health_the_page_and_metrics() -> None:
    served = serve(api_key=SecretStr("s3cret-key"))
    async with served.client() as client:
        missing = await client.post("/v1/ask", json={"question": COVERED})
        assert_error(missing, 401, "unauthorized", "API key")
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = await client.post("/v1/ask", json={"question": COVERED}, headers={"Authorization": "Bearer nope"})
        assert_error(wrong, 401, "unauthorized")
        for path in ("/v1/documents", "/openapi.json", "/docs"):
            assert (await client.get(path)).status_code == 401, path
        assert (await client.post("/v1/ask/stream", json={"question": COVERED})).status_code == 401
        assert (await client.delete("/v1/documents/b12")).status_code == 401
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/")).status_code == 200
        assert "sessionStorage" in (await client.get("/web/page.js")).text  # the page's script asks for the key
        assert (await client.get("/metrics")).status_code == 200
    async with served.client(Authorization="Bearer s3cret-key") as client:
        assert (await client.post("/v1/ask", json={"question": COVERED})).status_code == 200
        assert (await client.get("/v1/documents?limit=1")).status_code == 200
        assert (await client.get("/openapi.json")).status_code == 200


async def test_health_is_503_unless_every_check_passes() -> None:
    async with serve().client() as client:
        ok = await client.get("/health")
    assert ok.status_code == 200 and ok.json()["checks"]["memory"]["ok"] is True
    assert ok.json()["checks"]["memory"]["detail"] == f"{len(DOCUMENTS)} documents"
    async with serve(checks_ok=False).client() as client:
        down = await client.get("/health")
    assert down.status_code == 503 and down.json()["ok"] is False
    assert down.json()["checks"]["memory"]["detail"] == "ConnectionError: memory is down"


async def test_readiness_is_shallow_and_open_while_a_dependency_is_down() -> None:
    """Readiness (`/ready`, the readiness probe) runs no dependency check: a shared dependency that is down or slow
    does not take every replica out of the Service; `/health` reports it."""
    served = serve(checks_ok=False, api_key=SecretStr("s3cret-key"))
    async with served.client() as client:
        ready = await client.get("/ready")
        assert ready.status_code == 200 and ready.json() == {"ok": True}
        assert (await client.get("/health")).status_code == 503


async def test_health_bounds_each_check_below_the_probe_timeout() -> None:
    """A dependency check that hangs is reported failed after `HEALTH_CHECK_TIMEOUT_S`, so /health answers within
    the bound (the probes' timeoutSeconds is 5 s) and names the check."""
    served = serve(health_check_timeout_s=0.2)

    async def hangs() -> str:
        await asyncio.sleep(60)
        return "never"

    checks = served.rag.services.checks
    assert isinstance(checks, dict)
    checks["slow"] = hangs
    async with served.client() as client:
        started = asyncio.get_running_loop().time()
        down = await client.get("/health")
        elapsed = asyncio.get_running_loop().time() - started
    assert down.status_code == 503 and elapsed < 2.0
    reported = down.json()["checks"]
    assert reported["slow"]["ok"] is False and "TimeoutError" in reported["slow"]["detail"]
    assert reported["memory"]["ok"] is True


async def test_document_lifecycle(served: Served) -> None:
    doc = {"doc_id": "scratch", "title": "Scratch", "text": "Scratch space lives under /tmp.", "metadata": {"a": 1}}
    async with served.client() as client:
        bad = await client.post("/v1/documents", json={"documents": [doc | {"text": "nul \u0000 here"}]})
        assert_error(bad, 422, "bad_request", "NUL")
        assert_error(await client.post("/v1/documents", json={"documents": []}), 422, "bad_request", "documents")
        added = await client.post("/v1/documents", json={"documents": [doc]})
        assert added.status_code == 201 and added.json() == {"added": 1, "skipped": 0, "chunks": 1}
        again = await client.post("/v1/documents", json={"documents": [doc]})
        assert again.json() == {"added": 0, "skipped": 1, "chunks": 0}
        listed = (await client.get("/v1/documents", params={"limit": 100})).json()["documents"]
        stored = next(d for d in listed if d["doc_id"] == "scratch")
        assert stored["source"] == "http" and stored["chunks"] == 1 and len(stored["content_hash"]) == 64
        assert [d["doc_id"] for d in listed] == sorted(d["doc_id"] for d in listed)
        assert len((await client.get("/v1/documents", params={"limit": 1, "offset": 1})).json()["documents"]) == 1
        assert_error(await client.get("/v1/documents", params={"limit": -1}), 422, "bad_request", "limit")
        deleted = await client.delete("/v1/documents/scratch")
        assert deleted.status_code == 200 and deleted.json() == {"deleted": ["scratch"]}
        assert_error(await client.delete("/v1/documents/scratch"), 404, "document_not_found", "scratch")


async def test_documents_too_large_to_index_in_one_request_are_refused_with_the_upload_route() -> None:
    served = serve(documents_max_text_chars=1000)
    doc = {"doc_id": "big", "title": "Big", "text": "word " * 150}
    async with served.client() as client:
        refused = await client.post("/v1/documents", json={"documents": [doc, doc | {"doc_id": "big2"}]})
        assert_error(refused, 413, "payload_too_large", "DOCUMENTS_MAX_TEXT_CHARS=1000")
        assert "POST /v1/documents/files" in refused.json()["detail"]
        assert (await served.collection.count())[0] == len(DOCUMENTS)  # nothing was stored
        added = await client.post("/v1/documents", json={"documents": [doc]})
        assert added.status_code == 201 and added.json()["added"] == 1


async def test_openapi_names_the_error_body(served: Served) -> None:
    async with served.client() as client:
        schema = (await client.get("/openapi.json")).json()
    assert "ErrorBody" in schema["components"]["schemas"]
    for path, method in (("/v1/ask", "post"), ("/v1/documents", "get"), ("/v1/documents/{doc_id}", "delete")):
        responses = schema["paths"][path][method]["responses"]
        assert responses["503"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody"), path
