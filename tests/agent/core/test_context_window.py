"""Passages fitted to the LLM's context window (agent/core/context_window.py), through the real agent and OpenAI client
against the scripted fake OpenAI server, which reports `max_model_len` as vLLM does. Token counts use a real
`tokenizer.json` (the embedder's, shipped in its package: any Hugging Face tokenizer exercises the same logic; the
real LLM's is used in test_context_window_real_llm.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, TextPart, UserPromptPart

from agent.config.settings import Policy, Settings
from agent.core.answer import AnswerLimits, AnswerRequest, answer
from agent.core.context_window import MARGIN_TOKENS, TOKENS_PER_MESSAGE, ContextFitter, tokenizer_counter
from agent.core.llm import build_model, model_settings
from agent.core.prompts import SYSTEM_PROMPT, user_prompt
from agent.core.rag_agent import NO_ROOM, RagDeps, build_agent
from agent.core.results import AskResult
from tests.fake_openai import FakeOpenAIServer, Reply
from tests.ranked_search import RankedSearch, passage
from tools.model_specs import get_spec
from tools.retrieval import Passage, RetrievalResult
from tools.scope import SearchScope

QUESTION = "Does vitamin B12 deficiency raise homocysteine?"
TEXT = (
    "Vitamin B12 deficiency raises plasma homocysteine in older adults; supplementation for eight weeks lowered "
    "the concentration by a quarter in a randomised trial of 320 participants aged 65 to 80 years. "
) * 3
PASSAGES = [passage(n, TEXT) for n in range(1, 41)]
MAX_TOKENS = 64


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def tokenizer_json() -> Path:
    return get_spec("all-minilm-l6-v2").tokenizer_file()


def fake_settings(fake: FakeOpenAIServer, tmp_path: Path, **update: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "llm_base_url": fake.base_url,
        "vllm_port": fake.port,
        "llm_model": "fake",
        "llm_max_retries": 0,
        "llm_timeout_s": 10.0,
        "llm_max_tokens": MAX_TOKENS,
    }
    return Settings(_env_file=None, **(values | update))  # type: ignore[call-arg]


async def ask(settings: Settings, top_k: int = 40) -> AskResult:
    agent = build_agent(build_model(settings), model_settings(settings), "always")
    deps = RagDeps(RankedSearch(PASSAGES), 3, refusal_min_score=-1.0, context=ContextFitter(settings))
    return await answer(agent, deps, AnswerRequest(QUESTION, top_k), AnswerLimits(timeout_s=60))


def prompt_tokens(request: dict[str, Any], tokenizer_json: Path) -> int:
    count = tokenizer_counter(tokenizer_json)
    messages = request["messages"]
    return sum(count(str(m["content"])) for m in messages) + TOKENS_PER_MESSAGE * len(messages) + MARGIN_TOKENS


async def test_the_lowest_ranked_passages_are_dropped_to_fit_the_served_context(
    fake: FakeOpenAIServer, tokenizer_json: Path, tmp_path: Path
) -> None:
    fake.state.max_model_len = 1024
    try:
        requests = fake.reset(Reply(text="Yes [1], see also [40]."))
        settings = fake_settings(fake, tmp_path, llm_tokenizer=tokenizer_json)
        result = await ask(settings)
    finally:
        fake.state.max_model_len = None
    kept = 40 - len(result.dropped_passages)
    assert 1 <= kept < 40, result.dropped_passages
    assert result.dropped_passages == [p.chunk_id for p in PASSAGES[kept:]]  # the lowest-ranked, in rank order
    assert prompt_tokens(requests[0], tokenizer_json) <= 1024 - MAX_TOKENS
    user = requests[0]["messages"][-1]["content"]
    assert f"[{kept}]" in user and f"[{kept + 1}]" not in user
    one_more = tokenizer_counter(tokenizer_json)(user_prompt(QUESTION, PASSAGES[: kept + 1]))
    system = tokenizer_counter(tokenizer_json)(SYSTEM_PROMPT)
    assert one_more + system + 2 * TOKENS_PER_MESSAGE + MARGIN_TOKENS > 1024 - MAX_TOKENS  # as many as fit
    assert [c.passage for c in result.citations] == [1] and result.dropped_citations == ["[40]"]


async def test_without_a_reported_length_the_setting_is_the_context(
    fake: FakeOpenAIServer, tokenizer_json: Path, tmp_path: Path
) -> None:
    fake.reset()
    small = await ask(fake_settings(fake, tmp_path, llm_tokenizer=tokenizer_json, llm_context_tokens=1024))
    large = await ask(fake_settings(fake, tmp_path, llm_tokenizer=tokenizer_json, llm_context_tokens=2048))
    assert 0 < len(large.dropped_passages) < len(small.dropped_passages)
    everything = await ask(fake_settings(fake, tmp_path, llm_tokenizer=tokenizer_json), top_k=3)
    assert everything.dropped_passages == []


async def test_without_a_tokenizer_the_estimate_still_fits(
    fake: FakeOpenAIServer, tokenizer_json: Path, tmp_path: Path
) -> None:
    settings = fake_settings(fake, tmp_path, llm_context_tokens=1024)
    assert ContextFitter(settings).counting == "estimate"
    requests = fake.reset()
    result = await ask(settings)
    assert result.dropped_passages and prompt_tokens(requests[0], tokenizer_json) <= 1024 - MAX_TOKENS


async def test_a_question_longer_than_the_context_is_a_clear_error(fake: FakeOpenAIServer, tmp_path: Path) -> None:
    settings = fake_settings(fake, tmp_path, llm_context_tokens=256, llm_max_tokens=200)
    with pytest.raises(ValueError, match="256-token context window"):
        await ask(settings)


class PagedSearch(RankedSearch):
    """Each search returns the next `top_k` passages of the ranked list: later searches find new passages."""

    def __init__(self, passages: list[Passage]) -> None:
        super().__init__(passages)
        self.offset = 0

    async def search(self, query: str, top_k: int, scope: SearchScope | None = None) -> RetrievalResult:
        found = self.passages[self.offset : self.offset + top_k]
        self.offset += top_k
        return RetrievalResult(query, found, {"embed": 0.0, "search": 0.0})


def request_tokens(request: dict[str, Any], tokenizer_json: Path) -> int:
    """Tokens of a chat request as the fitter counts them: message contents, tool calls and tool definitions."""
    count = tokenizer_counter(tokenizer_json)
    messages = request["messages"]
    texts = [str(m.get("content") or "") for m in messages]
    texts += [
        call["function"]["name"] + call["function"]["arguments"] for m in messages for call in m.get("tool_calls", [])
    ]
    texts += [json.dumps(tool["function"]) for tool in request.get("tools", [])]
    return sum(count(text) for text in texts) + TOKENS_PER_MESSAGE * len(messages) + MARGIN_TOKENS


async def test_passages_of_later_agentic_searches_are_fitted_to_the_context_too(
    fake: FakeOpenAIServer, tokenizer_json: Path, tmp_path: Path
) -> None:
    search = {"query": "vitamin B12 homocysteine", "top_k": 10}
    requests = fake.reset(
        Reply(tool_call=("search_documents", search | {"top_k": 5})),
        Reply(tool_call=("search_documents", search)),
        Reply(tool_call=("search_documents", search)),
        Reply(text="Yes [1], and [25]."),
    )
    settings = fake_settings(fake, tmp_path, llm_tokenizer=tokenizer_json, llm_context_tokens=2048)
    agent = build_agent(build_model(settings), model_settings(settings), "agentic")
    deps = RagDeps(PagedSearch(PASSAGES), 3, refusal_min_score=-1.0, context=ContextFitter(settings))
    result = await answer(agent, deps, AnswerRequest(QUESTION, policy="agentic"), AnswerLimits(timeout_s=60))
    assert len(requests) == 4
    for request in requests:
        assert request_tokens(request, tokenizer_json) <= 2048 - MAX_TOKENS
    results = [m["content"] for m in requests[3]["messages"] if m["role"] == "tool"]
    assert "[5]" in results[0] and "[6]" not in results[0]  # the first search's 5 passages fit
    assert "[6]" in results[1] and "[15]" not in results[1]  # the second one's were cut to what fits
    assert results[2] == NO_ROOM  # no room left: the model is told to answer
    kept = 25 - len(result.dropped_passages)
    assert 6 <= kept < 15 and result.dropped_passages == [p.chunk_id for p in PASSAGES[kept:25]]
    assert [c.passage for c in result.citations] == [1] and result.dropped_citations == ["[25]"]


@pytest.mark.parametrize("policy", ["always", "agentic"])
async def test_long_earlier_turns_are_dropped_oldest_first_instead_of_refusing_the_question(
    fake: FakeOpenAIServer, tokenizer_json: Path, tmp_path: Path, policy: Policy
) -> None:
    turns = [(f"Question number {n} about vitamins?", f"Answer {n}: " + TEXT) for n in range(1, 7)]
    history: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart("Answer briefly.")])]
    for question, reply in turns:
        history += [ModelRequest(parts=[UserPromptPart(question)]), ModelResponse(parts=[TextPart(reply)])]
    script = [Reply(tool_call=("search_documents", {"query": "b12", "top_k": 3}))] if policy == "agentic" else []
    requests = fake.reset(*script, Reply(text="Yes [1]."))
    settings = fake_settings(fake, tmp_path, llm_tokenizer=tokenizer_json, llm_context_tokens=1024)
    agent = build_agent(build_model(settings), model_settings(settings), policy)
    deps = RagDeps(RankedSearch(PASSAGES), 3, refusal_min_score=-1.0, context=ContextFitter(settings))
    request = AnswerRequest(QUESTION, policy=policy, history=history)
    result = await answer(agent, deps, request, AnswerLimits(timeout_s=60))
    assert result.answer == "Yes [1]."
    for sent in requests:
        assert request_tokens(sent, tokenizer_json) <= 1024 - MAX_TOKENS
        contents = [str(m.get("content") or "") for m in sent["messages"]]
        assert "Answer briefly." in contents and turns[-1][0] in contents  # instructions and the last turn kept
        assert turns[0][0] not in contents  # the oldest turn dropped
        asked = [c for c in contents if c.startswith("Question number")]
        assert asked == [q for q, _ in turns][-len(asked) :]  # a suffix: the newest turns, in order
