"""The OpenAI-compatible API of a real `rag serve` process, called with the official `openai` SDK (sync and async,
streamed and not): real Triton and Postgres with the test corpus, the scripted fake LLM server (tests/fake_openai.py)
as the generator, `API_KEY` set. The request contract in detail is tested in-process in test_openai_chat.py."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from agent.config.settings import Settings
from tests.fake_openai import FakeOpenAIServer, Reply
from tests.http_server import CLAIM, RagServe

pytestmark = pytest.mark.stack

KEY = "chat-key-1"
ANSWER = "Deficiency raises homocysteine [1]."


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        fake.state.default = Reply(text=ANSWER)
        yield fake


@pytest.fixture(scope="module")
def served(settings: Settings, ingested: str, fake_llm: FakeOpenAIServer) -> Iterator[RagServe]:
    env = {
        "LLM_BASE_URL": fake_llm.base_url,
        "VLLM_PORT": str(fake_llm.port),
        "LLM_MODEL": "fake",
        "LLM_MAX_RETRIES": "0",
        "LLM_MAX_TOKENS": "96",
        "API_KEY": KEY,
    }
    with RagServe(settings, env) as server:
        yield server


def sync_client(served: RagServe, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0, timeout=300)


def async_client(served: RagServe, key: str = KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0, timeout=300)


def citations_of(extra: dict[str, object] | None) -> list[dict[str, object]]:
    citations = (extra or {})["citations"]
    assert isinstance(citations, list)
    return citations


async def test_sdk_completion_sync_and_async(served: RagServe, fake_llm: FakeOpenAIServer) -> None:
    models = [m.id for m in sync_client(served).models.list()]
    assert models == ["triton-rag", "triton-rag-always", "triton-rag-agentic"]
    requests = fake_llm.reset()
    completion = sync_client(served).chat.completions.create(
        model="triton-rag", messages=[{"role": "user", "content": CLAIM}], max_tokens=40, temperature=0.3
    )
    again = await async_client(served).chat.completions.create(
        model="triton-rag", messages=[{"role": "user", "content": CLAIM}]
    )
    for result in (completion, again):
        assert result.object == "chat.completion" and result.model == "triton-rag"
        assert result.choices[0].message.content == ANSWER and result.choices[0].finish_reason == "stop"
        assert result.usage is not None and result.usage.prompt_tokens == 10  # as the fake LLM reported it
        assert result.usage.completion_tokens == len(ANSWER.split())
        cited = citations_of(result.model_extra)
        assert [c["passage"] for c in cited] == [1] and (result.model_extra or {})["refused"] is False
    assert requests[0]["max_tokens"] == 40 and requests[0]["temperature"] == 0.3
    assert requests[1]["max_tokens"] == 96  # LLM_MAX_TOKENS when the request sets none
    assert CLAIM in requests[0]["messages"][-1]["content"]  # the question, with its retrieved passages


async def test_sdk_stream_sync_and_async(served: RagServe, fake_llm: FakeOpenAIServer) -> None:
    fake_llm.reset()
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": CLAIM}]
    text, finishes, extras = "", [], []
    with sync_client(served).chat.completions.create(
        model="triton-rag", messages=messages, stream=True, stream_options={"include_usage": True}
    ) as stream:
        usage = None
        for chunk in stream:
            text += "".join(choice.delta.content or "" for choice in chunk.choices)
            finishes += [choice.finish_reason for choice in chunk.choices if choice.finish_reason]
            extras += [chunk.model_extra] if any(choice.finish_reason for choice in chunk.choices) else []
            usage = chunk.usage or usage
    assert text == ANSWER and finishes == ["stop"] and [c["passage"] for c in citations_of(extras[0])] == [1]
    assert usage is not None and usage.prompt_tokens == 10

    pieces = []
    async with await async_client(served).chat.completions.create(
        model="triton-rag-always", messages=messages, stream=True
    ) as astream:
        async for chunk in astream:
            pieces += [choice.delta.content or "" for choice in chunk.choices]
            assert chunk.usage is None
    assert "".join(pieces) == ANSWER


def test_follow_up_sends_the_conversation_to_the_llm(served: RagServe, fake_llm: FakeOpenAIServer) -> None:
    requests = fake_llm.reset()
    client = sync_client(served)
    first = client.chat.completions.create(model="triton-rag", messages=[{"role": "user", "content": CLAIM}])
    answer = first.choices[0].message.content or ""
    follow_up = client.chat.completions.create(
        model="triton-rag",
        messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": CLAIM},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "Is that true in older adults too?"},
        ],
    )
    assert follow_up.choices[0].message.content == ANSWER
    sent = [(m["role"], m["content"]) for m in requests[1]["messages"]]
    assert ("system", "Answer briefly.") in sent and ("user", CLAIM) in sent
    assert ("assistant", "Deficiency raises homocysteine.") in sent  # the earlier answer, markers removed
    assert sent[-1][0] == "user" and "Is that true in older adults too?" in sent[-1][1]
    assert [c["passage"] for c in citations_of(follow_up.model_extra)] == [1]


async def test_wrong_key_is_a_401_in_openai_shape(served: RagServe) -> None:
    with pytest.raises(openai.AuthenticationError) as sync_error:
        sync_client(served, key="wrong").chat.completions.create(
            model="triton-rag", messages=[{"role": "user", "content": CLAIM}]
        )
    with pytest.raises(openai.AuthenticationError) as async_error:
        await async_client(served, key="wrong").models.list()
    for error in (sync_error.value, async_error.value):
        assert error.status_code == 401 and error.code == "unauthorized" and error.type == "authentication_error"
    with pytest.raises(openai.NotFoundError) as unknown:
        sync_client(served).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": CLAIM}])
    assert unknown.value.code == "model_not_found"
