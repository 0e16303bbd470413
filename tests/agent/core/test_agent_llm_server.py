"""LLM-server behaviours only Triton's OpenAI frontend (or a failing server) shows, against a scripted fake OpenAI
server (`tests/fake_openai.py`), with the in-memory collection behind the agent (the real retriever, Triton +
Postgres, for the agentic tool call)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.usage import UsageLimits

from agent.config.settings import Policy, Settings
from agent.core.answer import AnswerLimits, AnswerRequest, answer
from agent.core.app import RagApp
from agent.core.errors import AnswerLimitError, LLMConfigError, LLMResponseError, LLMUnavailableError
from agent.core.llm import build_model, check_tool_calling, model_settings
from agent.core.rag_agent import RagDeps, build_agent
from agent.core.results import AskResult
from infra.processes import free_port
from tests.agent_corpus import DOCUMENTS
from tests.fake_openai import TRITON_DEFAULT_MAX_TOKENS, VLLM_NO_TOOLS_ERROR, FakeOpenAIServer, Reply
from tools.embedder import TritonEmbedder
from tools.in_memory import InMemoryCollection
from tools.retrieval import PassageSearch, Retriever
from tools.store import VectorStore

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."
LONG_ANSWER = " ".join(f"word{i}" for i in range(40)) + " [1]."


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def fake_settings(settings: Settings, fake: FakeOpenAIServer, **update: Any) -> Settings:
    values: dict[str, Any] = {
        "llm_base_url": fake.base_url,
        "llm_model": "fake",
        "llm_profile": "triton",
        "llm_max_retries": 0,
        "llm_timeout_s": 5.0,
        "llm_max_tokens": 64,
    }
    return settings.model_copy(update=values | update)


async def run(
    s: Settings,
    retriever: PassageSearch | None = None,
    policy: Policy = "always",
    limits: UsageLimits | None = None,
    timeout_s: float | None = None,
) -> AskResult:
    agent = build_agent(build_model(s), model_settings(s), policy)
    deps = RagDeps(retriever or InMemoryCollection(DOCUMENTS), 3, refusal_min_score=-1.0)
    bounds = AnswerLimits(usage=limits or UsageLimits(), timeout_s=timeout_s, llm_timeout_s=s.llm_timeout_s)
    return await answer(agent, deps, AnswerRequest(CLAIM, policy=policy), bounds)


async def test_max_tokens_is_always_sent_so_triton_does_not_cut_at_16(
    fake: FakeOpenAIServer, settings: Settings
) -> None:
    requests = fake.reset(Reply(text=LONG_ANSWER))
    result = await run(fake_settings(settings, fake))
    assert requests[0]["max_tokens"] == 64
    assert "max_completion_tokens" not in requests[0]  # Triton's frontend reads `max_tokens`
    assert len(result.answer.split()) > TRITON_DEFAULT_MAX_TOKENS
    assert result.answer.startswith("word0 word1") and result.answer.endswith("[1].")
    assert "response_format" not in requests[0] and "tools" not in requests[0]


async def test_triton_profile_never_forces_a_tool_choice(fake: FakeOpenAIServer, settings: Settings) -> None:
    class Verdict(BaseModel):
        supported: bool

    sent = {}
    for profile in ("vllm", "triton"):
        s = fake_settings(settings, fake, llm_profile=profile)
        requests = fake.reset(Reply(tool_call=("final_result", {"supported": True})))
        agent = Agent(build_model(s), output_type=Verdict, model_settings=model_settings(s))
        assert (await agent.run("Is it?")).output.supported is True
        sent[profile] = requests[0]
    assert sent["vllm"]["tool_choice"] == "required"  # what the triton profile must avoid
    assert sent["triton"]["tool_choice"] == "auto"
    assert "response_format" not in sent["triton"]


async def test_agentic_tool_call_is_answered_with_validated_citations(
    fake: FakeOpenAIServer, settings: Settings, store: VectorStore, embedder: TritonEmbedder
) -> None:
    requests = fake.reset(
        Reply(tool_call=("search_documents", {"query": "vitamin B12 homocysteine", "top_k": 3})),
        Reply(text="Deficiency raises homocysteine [1], see also [9]."),
    )
    result = await run(fake_settings(settings, fake), Retriever(embedder, store), policy="agentic")
    assert result.searches == ["vitamin B12 homocysteine"]
    assert [c.passage for c in result.citations] == [1]
    assert "[9]" not in result.answer
    assert {t["function"]["name"] for t in requests[0]["tools"]} == {"search_documents", "get_document"}
    assert requests[0]["tool_choice"] == "auto"
    tool_message = next(m for m in requests[1]["messages"] if m["role"] == "tool")
    assert "<passages>" in tool_message["content"] and "[1] (doc " in tool_message["content"]
    retrieved = await Retriever(embedder, store).search("vitamin B12 homocysteine", 3)
    assert result.citations[0].chunk_id == retrieved.passages[0].chunk_id


async def test_server_without_tool_calling_is_detected_at_start_up(
    fake: FakeOpenAIServer, settings: Settings, store: VectorStore
) -> None:
    fake.reset(Reply(status=400, body=VLLM_NO_TOOLS_ERROR))
    with pytest.raises(LLMConfigError, match="--enable-auto-tool-choice --tool-call-parser"):
        await check_tool_calling(fake_settings(settings, fake, llm_profile="vllm"))
    fake.reset(Reply(status=400, body=VLLM_NO_TOOLS_ERROR))
    with pytest.raises(LLMConfigError, match="--tool-call-parser llama3"):
        async with RagApp.from_settings(fake_settings(settings, fake, agent_policy="agentic")):
            pass
    requests = fake.reset(Reply(text="ok"))
    await check_tool_calling(fake_settings(settings, fake))
    assert requests[0]["tools"][0]["function"]["name"] == "ping" and requests[0]["max_tokens"] == 1


async def test_empty_choices_is_a_typed_error(fake: FakeOpenAIServer, settings: Settings) -> None:
    requests = fake.reset(Reply(empty_choices=True), Reply(text="Second try [1]."))
    result = await run(fake_settings(settings, fake))  # pydantic-ai asks again once
    assert result.answer == "Second try [1]." and len(requests) == 2
    requests = fake.reset(*[Reply(empty_choices=True)] * 5)
    with pytest.raises(LLMResponseError, match=r"could not be used: Exceeded maximum output retries"):
        await run(fake_settings(settings, fake))
    assert len(requests) == 2
    fake.reset(Reply(text="<think>only reasoning</think>"))
    with pytest.raises(LLMResponseError, match="no answer text"):
        await run(fake_settings(settings, fake))


async def test_5xx_is_retried_a_bounded_number_of_times(fake: FakeOpenAIServer, settings: Settings) -> None:
    requests = fake.reset(Reply(status=503), Reply(status=502), Reply(text="Recovered [1]."))
    result = await run(fake_settings(settings, fake, llm_max_retries=2))
    assert result.answer == "Recovered [1]." and len(requests) == 3
    requests = fake.reset(*[Reply(status=500)] * 5)
    with pytest.raises(LLMUnavailableError, match="failed after retries"):
        await run(fake_settings(settings, fake, llm_max_retries=1))
    assert len(requests) == 2


async def test_timeout_and_connection_refused_are_typed_errors(fake: FakeOpenAIServer, settings: Settings) -> None:
    fake.reset(Reply(text="late", delay_s=3.0))
    with pytest.raises(LLMUnavailableError, match=r"did not answer within 0.5 s"):
        await run(fake_settings(settings, fake, llm_timeout_s=0.5))
    nothing = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LLMUnavailableError, match="cannot reach the LLM server"):
        await run(fake_settings(settings, fake, llm_base_url=nothing))


async def test_limits_give_typed_errors(fake: FakeOpenAIServer, settings: Settings) -> None:
    s = fake_settings(settings, fake)
    search = Reply(tool_call=("search_documents", {"query": "homocysteine"}))
    fake.reset(*[search] * 5)
    with pytest.raises(AnswerLimitError, match="more than 2 LLM requests") as exc:
        await run(s, policy="agentic", limits=UsageLimits(request_limit=2))
    assert exc.value.limit == "requests"
    fake.reset(*[search] * 5)
    with pytest.raises(AnswerLimitError) as exc:
        await run(s, policy="agentic", limits=UsageLimits(request_limit=10, tool_calls_limit=1))
    assert exc.value.limit == "tool_calls"
    fake.reset(Reply(text=LONG_ANSWER))
    with pytest.raises(AnswerLimitError) as exc:
        await run(s, limits=UsageLimits(total_tokens_limit=20))
    assert exc.value.limit == "tokens"
    fake.reset(Reply(text="slow", delay_s=2.0))
    with pytest.raises(AnswerLimitError, match=r"longer than 0.5 s") as exc:
        await run(s, timeout_s=0.5)
    assert exc.value.limit == "timeout"
