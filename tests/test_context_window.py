"""Passages fitted to the LLM's context window (agent/context_window.py), through the real agent and OpenAI client
against the scripted fake OpenAI server, which reports `max_model_len` as vLLM does. Token counts use a real
`tokenizer.json` (the embedder's, shipped in its package: any Hugging Face tokenizer exercises the same logic; the
real LLM's is used in test_context_window_real_llm.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.answer import AnswerLimits, AnswerRequest, answer
from agent.context_window import MARGIN_TOKENS, TOKENS_PER_MESSAGE, ContextFitter, tokenizer_counter
from agent.llm import build_model, model_settings
from agent.prompts import SYSTEM_PROMPT, user_prompt
from agent.rag_agent import RagDeps, build_agent
from agent.results import AskResult
from agent.settings import Settings
from tests.fake_openai import FakeOpenAIServer, Reply
from tests.ranked_search import RankedSearch, passage
from tools.model_specs import get_spec

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
