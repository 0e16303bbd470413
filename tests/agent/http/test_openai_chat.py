"""The OpenAI-compatible routes in-process (`/v1/chat/completions`, `/v1/models`): the app of `rag serve` with its
`RagApp` swapped for one over the in-memory collection and a pydantic-ai FunctionModel, called with raw HTTP (the
exact wire shapes and SSE framing) and with the official `openai` SDK over an ASGI transport. Shapes, streaming,
restarts kept out of the stream, conversations, LLM settings, scope, admission, errors in OpenAI's shape. Against
a real `rag serve` process: test_openai_serve.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import openai
import pytest
from pydantic import SecretStr
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart

from agent.core.followup import condensed_query
from agent.core.prompts import REFUSAL
from agent.core.results import AskResult
from agent.http import openai_chat
from agent.http.openai_chat import completion_of
from tests.agent_corpus import COVERED, OFF_TOPIC
from tests.openai_rig import Rig, ask, assert_openai_error, chunks
from tools.scope import SearchScope

KEY = "s3cret-key"


@pytest.fixture
def rig() -> Rig:
    return Rig()


async def test_models_lists_the_served_ids_and_unknown_models_are_404(rig: Rig) -> None:
    async with rig.http() as client:
        listed = (await client.get("/v1/models")).json()
        assert listed["object"] == "list"
        assert [m["id"] for m in listed["data"]] == ["triton-rag", "triton-rag-always", "triton-rag-agentic"]
        assert {m["object"] for m in listed["data"]} == {"model"} and all(m["created"] > 0 for m in listed["data"])
        assert_openai_error(await client.get("/v1/models/gpt-4o"), 404, "model_not_found", "model")
        unknown = await client.post("/v1/chat/completions", json=ask(model="gpt-4o"))
        assert "triton-rag" in assert_openai_error(unknown, 404, "model_not_found", "model")
    sdk = rig.sdk()
    assert (await sdk.models.retrieve("triton-rag-agentic")).id == "triton-rag-agentic"
    with pytest.raises(openai.NotFoundError):
        await sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": COVERED}])
    assert not rig.model.seen and not getattr(rig.collection, "scopes", [])


async def test_completion_is_a_chat_completion_with_citations_and_usage(rig: Rig) -> None:
    async with rig.http() as client:
        response = await client.post("/v1/chat/completions", json=ask())
    body = response.json()
    assert response.status_code == 200, body
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-") and body["model"] == "triton-rag"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "It does [1].", "refusal": None},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert [c["doc_id"] for c in body["citations"]] == ["b12"] and body["citations"][0]["passage"] == 1
    assert body["refused"] is False
    # the completion id names the answer: `chatcmpl-<answer_id>`, the key a rating refers to (POST /v1/feedback)
    record = await rig.rag.feedback.record(body["id"])
    assert f"chatcmpl-{record.answer_id}" == body["id"] and record.question == COVERED
    completion = await rig.sdk().chat.completions.create(
        model="triton-rag", messages=[{"role": "user", "content": COVERED}]
    )
    assert completion.choices[0].message.content == "It does [1]." and completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens == usage["total_tokens"]
    assert (completion.model_extra or {})["citations"][0]["chunk_id"] == body["citations"][0]["chunk_id"]


async def test_ask_keeps_its_json_shape(rig: Rig) -> None:
    async with rig.http() as client:
        body = (await client.post("/v1/ask", json={"question": COVERED})).json()
    assert "usage" not in body and body["answer"] == "It does [1]."


async def test_off_topic_question_is_the_refusal_without_citations(rig: Rig) -> None:
    completion = await rig.sdk().chat.completions.create(
        model="triton-rag", messages=[{"role": "user", "content": OFF_TOPIC}]
    )
    assert completion.choices[0].message.content == REFUSAL and completion.choices[0].finish_reason == "stop"
    assert completion.model_extra == {"citations": [], "refused": True, "cached": False, "support": None}
    assert completion.usage is not None and completion.usage.total_tokens == 0 and not rig.model.seen


async def test_stream_frames_role_text_finish_usage_then_done(rig: Rig) -> None:
    rig.model.text = "Deficiency raises homocysteine [1]."
    request = ask(stream=True, stream_options={"include_usage": True})
    async with rig.http() as client:
        response = await client.post("/v1/chat/completions", json=request)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert (
        response.headers["cache-control"] == "no-cache, no-transform" and response.headers["x-accel-buffering"] == "no"
    )
    events = chunks(response.text)
    assert events[-1] == "[DONE]"
    role, text, finish, usage = events[:-1]
    ids = {e["id"] for e in events[:-1]}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    assert (await rig.rag.feedback.record(role["id"])).answer_id == role["id"].removeprefix("chatcmpl-")
    assert {e["object"] for e in events[:-1]} == {"chat.completion.chunk"}
    assert {e["model"] for e in events[:-1]} == {"triton-rag"}
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert text["choices"][0]["delta"] == {"content": "Deficiency raises homocysteine [1]."}
    assert role["choices"][0]["finish_reason"] is None and text["usage"] is None
    assert finish["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}
    assert [c["doc_id"] for c in finish["citations"]] == ["b12"] and finish["refused"] is False
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    async with rig.http() as client:  # without include_usage: no usage chunk
        plain = chunks((await client.post("/v1/chat/completions", json=ask(stream=True))).text)
    assert len(plain) == 4 and plain[-2]["choices"][0]["finish_reason"] == "stop" and plain[-2]["usage"] is None

    stream = await rig.sdk().chat.completions.create(
        model="triton-rag", messages=[{"role": "user", "content": COVERED}], stream=True
    )
    pieces, reasons = [], []
    async for chunk in stream:
        pieces += [c.delta.content or "" for c in chunk.choices]
        reasons += [c.finish_reason for c in chunk.choices if c.finish_reason]
    assert "".join(pieces) == "Deficiency raises homocysteine [1]." and reasons == ["stop"]


async def test_a_restart_never_reaches_the_stream(rig: Rig) -> None:
    # text shown first turns out to be reasoning (a `</think>` whose `<think>` the chat template opened): /v1/ask/stream
    # restarts; the chat stream sends only the final answer
    rig.model.text = "Maybe folate, maybe not.</think>It does [1]."
    async with rig.http() as client:
        ask_stream = await client.post("/v1/ask/stream", json={"question": COVERED})
        chat = await client.post("/v1/chat/completions", json=ask(stream=True))
    shown = [json.loads(line[6:]) for line in ask_stream.text.splitlines() if line.startswith("data: ")]
    draft = "".join(e.get("text", "") for e in shown[: next(i for i, e in enumerate(shown) if e["type"] == "restart")])
    assert draft.startswith("Maybe folate")  # /v1/ask/stream showed the draft, then restarted
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks(chat.text)[:-1] if c["choices"])
    assert text == "It does [1]."


def test_truncated_answer_finishes_with_length() -> None:
    cut = AskResult(answer="It does", citations=[], timings_ms={}, truncated=True)
    assert completion_of(cut, "chatcmpl-1", 1, "triton-rag").choices[0].finish_reason == "length"


async def test_conversation_becomes_history_and_the_condensed_search_query(rig: Rig) -> None:
    messages = [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "Vitamin B12 deficiency in older adults"},
        {"role": "assistant", "content": "It raises homocysteine [1]."},
        {"role": "user", "content": [{"type": "text", "text": "and what about its homocysteine levels?"}]},
    ]
    async with rig.http() as client:
        response = await client.post("/v1/chat/completions", json={"model": "triton-rag", "messages": messages})
    assert response.status_code == 200, response.text
    expected = condensed_query(["Vitamin B12 deficiency in older adults"], "and what about its homocysteine levels?")
    assert rig.collection.searches == [expected]
    sent = rig.model.seen[0]
    assert isinstance(sent[0], ModelRequest) and isinstance(sent[1], ModelResponse)
    assert [p.content for p in sent[0].parts if isinstance(p, SystemPromptPart)] == ["Answer in one sentence."]
    assert [p.content for p in sent[0].parts if isinstance(p, UserPromptPart)] == [
        "Vitamin B12 deficiency in older adults"
    ]
    assert sent[1].text == "It raises homocysteine."  # markers of an earlier turn name passages no longer shown
    assert "and what about its homocysteine levels?" in str(sent[-1])


async def test_only_the_last_chat_history_turns_are_sent() -> None:
    rig = Rig(chat_history_turns=1)
    messages: list[dict[str, str]] = []
    for i in range(3):
        messages += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    messages.append({"role": "user", "content": COVERED})
    async with rig.http() as client:
        response = await client.post("/v1/chat/completions", json={"model": "triton-rag", "messages": messages})
    assert response.status_code == 200, response.text
    history = str(rig.model.seen[0][:-1])
    assert "question 2" in history and "answer 2" in history and "question 1" not in history


async def test_sampling_fields_reach_the_llm_and_max_tokens_is_capped() -> None:
    rig = Rig(llm_max_tokens=64)
    request = ask(max_tokens=1000, temperature=0.7, top_p=0.5, seed=7, stop="END", presence_penalty=0.5, user="u1")
    async with rig.http() as client:
        assert (await client.post("/v1/chat/completions", json=request)).status_code == 200
        request = ask(max_tokens=1000, max_completion_tokens=12, logit_bias={"1": 2}, metadata={"k": "v"})
        assert (await client.post("/v1/chat/completions", json=request)).status_code == 200
        assert (await client.post("/v1/chat/completions", json=ask())).status_code == 200
    first, second, default = rig.model.settings
    assert first["max_tokens"] == 64 and first["temperature"] == 0.7 and first["top_p"] == 0.5
    assert first["seed"] == 7 and first["stop_sequences"] == ["END"] and first["presence_penalty"] == 0.5
    assert second["max_tokens"] == 12 and "logit_bias" not in second
    assert default["max_tokens"] == 64 and default["temperature"] == rig.settings.llm_temperature


async def test_model_chooses_the_retrieval_policy(rig: Rig) -> None:
    offered = {}
    async with rig.http() as client:
        for model in ("triton-rag-always", "triton-rag-agentic", "triton-rag"):
            rig.model.tools.clear()
            assert (await client.post("/v1/chat/completions", json=ask(model=model))).status_code == 200
            offered[model] = rig.model.tools[0]  # the tools of the answer's first LLM request
    always, agentic, default = offered.values()
    assert "search_documents" not in always and "search_documents" in agentic
    assert default == (agentic if rig.settings.agent_policy == "agentic" else always)


async def test_filter_and_collection_become_the_search_scope(rig: Rig) -> None:
    request = ask(filter={"source": "t", "year": [2019, 2020]}, collection="papers")
    async with rig.http() as client:
        assert (await client.post("/v1/chat/completions", json=request)).status_code == 200
        bad = await client.post("/v1/chat/completions", json=ask(filter={"year": []}))
        assert "year" in assert_openai_error(bad, 422, "bad_request", "filter")
        bad = await client.post("/v1/chat/completions", json=ask(collection="Not A Name"))
        assert_openai_error(bad, 422, "bad_request", "collection")
        bad = await client.post("/v1/chat/completions", json=ask(collections=["ok", "Not ok"]))
        assert "Not ok" in assert_openai_error(bad, 422, "bad_request", "collections")
        bad = await client.post("/v1/chat/completions", json=ask(collection="a", collections=["b"]))
        assert_openai_error(bad, 422, "bad_request", "collection")
    assert rig.collection.scopes == [SearchScope.from_filter({"source": "t", "year": [2019, 2020]}, ["papers"])]


@pytest.mark.parametrize(
    ("request_body", "param", "needle"),
    [
        ({"model": "triton-rag", "messages": []}, "messages", "at least 1"),
        (ask() | {"messages": [{"role": "assistant", "content": "hi"}]}, "messages[0]", "last message"),
        (ask("   "), "messages[0].content", "blank"),
        (ask("a\u0000b"), "messages[0].content", "NUL"),
        (ask("x" * 4001), "messages[0].content", "4000"),
        (ask(temperature=3), "temperature", "less than or equal to 2"),
        (ask(n=2), "n", "one choice"),
        (ask(logprobs=True), "logprobs", "log probabilities"),
        (ask(response_format={"type": "json_object"}), "response_format", "cited text"),
        (ask(tool_choice="required"), "tool_choice", "no client tools"),
        (ask() | {"messages": [{"role": "tool", "content": "42", "tool_call_id": "c"}]}, "messages[0].role", "tools"),
        (
            ask() | {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages[0].content",
            "text parts",
        ),
        ({"messages": [{"role": "user", "content": "q"}]}, "model", "Field required"),
    ],
)
async def test_bad_requests_are_422_in_openai_shape_naming_the_param(
    rig: Rig, request_body: dict[str, Any], param: str, needle: str
) -> None:
    async with rig.http() as client:
        for stream in (False, True):
            response = await client.post("/v1/chat/completions", json=request_body | {"stream": stream})
            assert needle in assert_openai_error(response, 422, "bad_request", param)
        malformed = await client.post("/v1/chat/completions", content=b"{not json")
        assert_openai_error(malformed, 422, "bad_request", malformed.json()["error"]["param"])
    assert not rig.model.seen and not getattr(rig.collection, "scopes", [])
    with pytest.raises(openai.UnprocessableEntityError):
        await rig.sdk().chat.completions.create(model="triton-rag", messages=[], extra_body={})


async def test_api_key_401_and_405_are_in_openai_shape() -> None:
    rig = Rig(api_key=SecretStr(KEY))
    async with rig.http() as client:
        for path in ("/v1/models", "/v1/models/triton-rag"):
            missing = await client.get(path)
            assert_openai_error(missing, 401, "unauthorized")
            assert missing.headers["www-authenticate"] == "Bearer"
        wrong = await client.post("/v1/chat/completions", json=ask(), headers={"Authorization": "Bearer nope"})
        assert_openai_error(wrong, 401, "unauthorized")
        assert (await client.post("/v1/ask", json={"question": COVERED})).json()["error"] == "unauthorized"
    async with rig.http(Authorization=f"Bearer {KEY}") as client:
        not_allowed = await client.get("/v1/chat/completions")
        assert not_allowed.status_code == 405 and not_allowed.json()["error"]["code"] == "method_not_allowed"
    with pytest.raises(openai.AuthenticationError):
        await rig.sdk("nope").models.list()
    assert [m.id async for m in rig.sdk(KEY).models.list()] == ["triton-rag", "triton-rag-always", "triton-rag-agentic"]
    completion = await rig.sdk(KEY).chat.completions.create(
        model="triton-rag", messages=[{"role": "user", "content": COVERED}]
    )
    assert completion.choices[0].message.content == "It does [1]."


@pytest.mark.parametrize(
    ("error", "status", "code", "retry_after"),
    [
        (ModelHTTPError(500, "fake", "boom"), 503, "llm_unavailable", True),
        (ModelHTTPError(400, "fake", "bad request"), 502, "llm_bad_response", False),
        (KeyError("secret detail"), 500, "internal_error", False),
    ],
)
async def test_answer_failures_keep_ask_statuses_in_openai_shape(
    rig: Rig, error: Exception, status: int, code: str, retry_after: bool
) -> None:
    rig.model.error = error
    async with rig.http() as client:
        response = await client.post("/v1/chat/completions", json=ask())
        stream = await client.post("/v1/chat/completions", json=ask(stream=True))
        ask_response = await client.post("/v1/ask", json={"question": COVERED})
    assert_openai_error(response, status, code)
    assert ask_response.status_code == status and ask_response.json()["detail"] == response.json()["error"]["message"]
    assert ("retry-after" in response.headers) == retry_after and "secret detail" not in response.text
    events = chunks(stream.text)
    assert stream.status_code == 200 and events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1] == response.json() and "[DONE]" not in events  # the error is the stream's last event
    sdk_stream = await rig.sdk().chat.completions.create(
        model="triton-rag", messages=[{"role": "user", "content": COVERED}], stream=True
    )
    with pytest.raises(openai.APIError, match=response.json()["error"]["message"][:20]):
        async for _ in sdk_stream:
            pass


async def test_overload_is_a_503_before_any_stream_starts() -> None:
    rig = Rig(answer_max_in_progress=1, answer_queue_max=0)
    rig.model.gate = asyncio.Event()
    async with rig.http() as client:
        held = asyncio.create_task(client.post("/v1/chat/completions", json=ask()))
        await asyncio.wait_for(rig.model.started.wait(), 10)
        for stream in (False, True):
            refused = await client.post("/v1/chat/completions", json=ask(stream=stream))
            assert_openai_error(refused, 503, "overloaded")
            assert int(refused.headers["retry-after"]) >= 1
        rig.model.gate.set()
        assert (await held).status_code == 200
    assert len(rig.model.seen) == 1


class RawCall:
    """One streamed completion called through raw ASGI: `sent` records what the app sent; `disconnect` makes the
    client go away."""

    def __init__(self, rig: Rig) -> None:
        self.body = json.dumps(ask(stream=True)).encode()
        self.disconnect = asyncio.Event()
        self.sent: list[MutableMapping[str, Any]] = []
        self.delivered = False
        self.task = asyncio.create_task(rig.app(self.scope(), self.receive, self.send))
        self.body_sent = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if not self.delivered:
            self.delivered = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(message)
        self.body_sent.set()

    def scope(self) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"rag"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("rag", 80),
        }

    def text(self) -> str:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body").decode()


async def test_keep_alive_comments_flow_while_the_answer_runs(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_chat, "KEEPALIVE_S", 0.01)
    rig.model.gate = asyncio.Event()  # the model writes only when told to
    call = RawCall(rig)
    while ": ping" not in call.text():  # bounded by the pytest timeout; each ping is a 10 ms wait
        call.body_sent.clear()
        await call.body_sent.wait()
    rig.model.gate.set()
    await asyncio.wait_for(call.task, 10)
    events = chunks(call.text())
    assert events[-1] == "[DONE]" and events[1]["choices"][0]["delta"] == {"content": "It does [1]."}


async def test_closing_the_stream_cancels_the_answer(rig: Rig) -> None:
    rig.model.gate = asyncio.Event()  # the model writes only when told to
    call = RawCall(rig)
    await asyncio.wait_for(rig.model.started.wait(), 10)  # retrieval done, the model is writing
    call.disconnect.set()
    await asyncio.wait_for(call.task, 10)
    assert rig.model.cancelled  # the answer stopped with the client
    streamed = call.text()
    assert '"role":"assistant"' in streamed and 'finish_reason":"stop' not in streamed and "[DONE]" not in streamed
