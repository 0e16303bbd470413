"""How an LLM response ended (agent/core/llm_finish.py), through the real agent and OpenAI client against the scripted
fake OpenAI server: an answer cut at max_tokens is flagged `truncated`, a stream cut short is an error, a persistent
429 is a 503 that passes the server's `Retry-After` on. Retrieval is a fixed ranked list (no servers)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from agent.cli.chat import print_sources
from agent.config.settings import Settings
from agent.core.answer import AnswerLimits, AnswerRequest, answer
from agent.core.errors import LLMRateLimitedError, LLMUnavailableError
from agent.core.llm import build_model, model_settings
from agent.core.rag_agent import RagDeps, build_agent
from agent.core.results import AskResult
from agent.http.errors import error_response, failure_of
from tests.fake_openai import FakeOpenAIServer, Reply
from tests.ranked_search import RankedSearch

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."
RATE_LIMITED = {"error": {"message": "rate limit reached", "type": "rate_limit_exceeded", "code": 429}}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def fake_settings(fake: FakeOpenAIServer, **update: Any) -> Settings:
    values: dict[str, Any] = {
        "llm_base_url": fake.base_url,
        "vllm_port": fake.port,
        "llm_model": "fake",
        "llm_max_retries": 0,
        "llm_timeout_s": 10.0,
        "llm_max_tokens": 64,
    }
    return Settings(_env_file=None, **(values | update))  # type: ignore[call-arg]


async def ask(settings: Settings) -> AskResult:
    agent = build_agent(build_model(settings), model_settings(settings), "always")
    deps = RagDeps(RankedSearch(), 3, refusal_min_score=-1.0)
    return await answer(agent, deps, AnswerRequest(CLAIM), AnswerLimits(timeout_s=60))


async def test_an_answer_cut_at_max_tokens_is_kept_and_flagged_truncated(fake: FakeOpenAIServer) -> None:
    fake.reset(Reply(text="Yes, B12 deficiency raises homocysteine [1] because", finish_reason="length"))
    cut = await ask(fake_settings(fake))
    assert cut.truncated is True and cut.answer.startswith("Yes, B12 deficiency") and cut.citations
    assert cut.to_json_dict()["truncated"] is True
    fake.reset(Reply(text="Yes, it raises homocysteine [1]."))
    assert (await ask(fake_settings(fake))).truncated is False


async def test_a_stream_cut_short_is_a_retryable_error_not_an_answer(fake: FakeOpenAIServer) -> None:
    fake.reset(Reply(text="Yes, B12 deficiency raises", cut_short=True))
    with pytest.raises(LLMUnavailableError, match="cut short") as caught:
        await ask(fake_settings(fake))
    response = error_response(failure_of(caught.value))
    assert response.status_code == 503 and json.loads(bytes(response.body))["error"] == "llm_unavailable"
    assert response.headers["retry-after"] == "5"  # the server stopped or the connection dropped: ask again


async def test_a_persistent_429_is_a_503_passing_the_servers_retry_after_on(fake: FakeOpenAIServer) -> None:
    fake.reset(Reply(status=429, body=RATE_LIMITED, headers={"Retry-After": "7"}))
    with pytest.raises(LLMRateLimitedError) as caught:
        await ask(fake_settings(fake))
    assert caught.value.retry_after_s == 7.0
    response = error_response(failure_of(caught.value))
    assert response.status_code == 503 and response.headers["retry-after"] == "7"
    assert json.loads(bytes(response.body))["error"] == "llm_rate_limited"


def test_the_cli_and_chat_say_when_an_answer_is_incomplete() -> None:
    result = AskResult(
        answer="Yes, because", citations=[], timings_ms={"total": 1.0}, truncated=True, dropped_passages=["d9#0"]
    )
    out = io.StringIO()
    print_sources(Console(file=out, width=200), result)
    assert "answer cut short" in out.getvalue() and "LLM_MAX_TOKENS" in out.getvalue()
    assert "1 lower-ranked passages left out" in out.getvalue()
