"""The search query of a follow-up (`agent.core.followup`), without servers: the condensation, the LLM rewrite over a
pydantic-ai FunctionModel, and every way the rewrite falls back to the condensed query (a timeout, an error, an
unusable reply). A good rewrite is what the answer searches with, while the agent still answers the question asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, SystemPromptPart, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest, answer
from agent.core.followup import (
    REWRITE_INSTRUCTIONS,
    LLMRewriter,
    RewriteReply,
    condensed_query,
    search_query,
    usable_rewrite,
)
from agent.core.rag_agent import RagDeps, build_agent
from agent.core.wiring import build_rewriter
from tests.agent_corpus import DOCUMENTS
from tools.in_memory import InMemoryCollection

EARLIER = ["Does vitamin B12 deficiency matter in older adults?"]
QUESTION = "and what does it do to their homocysteine?"
CONDENSED = condensed_query(EARLIER, QUESTION)
GOOD = "Vitamin B12 deficiency and homocysteine in older adults"


class Rewriter:
    """A `QueryRewriter` that replies `reply`, raises `error`, or (with `hang`) never answers; counts its calls."""

    def __init__(self, reply: str = GOOD, error: Exception | None = None, hang: bool = False) -> None:
        self.reply, self.error, self.hang = reply, error, hang
        self.timeout_s = 0.05 if hang else 60.0  # only a hang meets the timeout, however loaded the machine
        self.calls: list[tuple[list[str], str]] = []

    async def rewrite(self, earlier_questions: Sequence[str], question: str) -> RewriteReply:
        self.calls.append((list(earlier_questions), question))
        if self.hang:
            await asyncio.Event().wait()
        if self.error is not None:
            raise self.error
        return RewriteReply(self.reply, input_tokens=40, output_tokens=len(self.reply.split()))


def test_condensed_query_leads_with_the_question_then_the_newest_earlier_turns() -> None:
    assert condensed_query(["q1", "q2", "q3"], "and then?") == "and then?\nq3\nq2"
    assert condensed_query([], "alone") == "alone"
    assert condensed_query(["x" * 50], "q", max_chars=10) == "q\n" + "x" * 8
    with pytest.raises(ValueError, match="question is empty"):
        condensed_query(["q1"], " ")


async def test_the_first_question_never_calls_the_rewriter() -> None:
    rewriter = Rewriter()
    found = await search_query([], QUESTION, rewriter)
    assert (found.query, found.method, found.fallback, rewriter.calls) == (QUESTION, "question", None, [])
    assert (await search_query(["  "], QUESTION, rewriter)).method == "question" and rewriter.calls == []


async def test_without_a_rewriter_the_follow_up_is_condensed() -> None:
    found = await search_query(EARLIER, QUESTION)
    assert (found.query, found.method, found.fallback, found.rewrite_ms) == (CONDENSED, "condensed", None, 0.0)


async def test_a_usable_rewrite_is_the_search_query() -> None:
    rewriter = Rewriter(reply=f'Standalone search query: "{GOOD}"\nThis asks about B12.')
    found = await search_query(["older", *EARLIER], QUESTION, rewriter, max_earlier=1)
    assert (found.query, found.method, found.fallback) == (GOOD, "rewritten", None)
    assert rewriter.calls == [(EARLIER, QUESTION)]  # only the last max_earlier earlier turns are sent
    assert found.rewrite_ms >= 0.0
    assert (found.input_tokens, found.output_tokens) == (40, len(rewriter.reply.split()))  # counted in usage


@pytest.mark.parametrize(
    ("rewriter", "fallback"),
    [
        (Rewriter(hang=True), "timeout"),
        (Rewriter(error=RuntimeError("connection refused")), "error"),
        (Rewriter(error=TimeoutError("the client's own clock")), "timeout"),
        (Rewriter(reply=""), "unusable"),
        (Rewriter(reply="   \n  "), "unusable"),
        (Rewriter(reply="Homocysteine is an amino acid. " * 20), "unusable"),  # an answer, not a query
        (Rewriter(reply="What does it do to their levels?"), "unusable"),  # the subject was dropped
        (Rewriter(reply=f'The answer to the question "{EARLIER[0]}" is:'), "unusable"),  # an echo and a preamble
        (Rewriter(reply="Vitamin B12 deficiency in older adults:"), "unusable"),  # a preamble
        (Rewriter(reply=f"{EARLIER[0]} Yes"), "unusable"),  # the earlier question echoed
    ],
    ids=["hangs", "errors", "times-out-inside", "empty", "blank", "too-long", "lost-subject", "echo", "colon", "copy"],
)
async def test_a_failed_or_unusable_rewrite_falls_back_to_the_condensed_query(
    rewriter: Rewriter, fallback: str
) -> None:
    found = await search_query(EARLIER, QUESTION, rewriter)
    assert (found.query, found.method, found.fallback) == (CONDENSED, "condensed", fallback)
    # An unusable reply still cost its tokens; no reply (a timeout, an error) reports none.
    assert found.input_tokens == (40 if fallback == "unusable" else 0)


async def test_cancellation_is_not_a_fallback() -> None:
    task = asyncio.create_task(search_query(EARLIER, QUESTION, Rewriter(hang=True)))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_usable_rewrite_strips_labels_and_quotes() -> None:
    assert usable_rewrite("Query: `B12 deficiency effects`", EARLIER, QUESTION) == "B12 deficiency effects"
    assert usable_rewrite("\n\n  'older adults B12'  \n", EARLIER, QUESTION) == "older adults B12"
    assert usable_rewrite("Query:", EARLIER, QUESTION) is None


async def test_llm_rewriter_sends_a_short_bounded_prompt() -> None:
    sent: list[list[ModelMessage]] = []
    settings: list[dict[str, object]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(messages)
        settings.append(dict(info.model_settings or {}))
        return ModelResponse(parts=[TextPart(GOOD)])

    rewriter = LLMRewriter(FunctionModel(reply), max_tokens=24, timeout_s=3.0, extra={"frequency_penalty": 0.5})
    assert (await rewriter.rewrite(EARLIER, QUESTION)).text == GOOD
    parts = sent[0][0].parts
    assert [p.content for p in parts if isinstance(p, SystemPromptPart)] == [REWRITE_INSTRUCTIONS]
    prompt = next(p.content for p in parts if isinstance(p, UserPromptPart))
    assert isinstance(prompt, str) and EARLIER[0] in prompt and QUESTION in prompt
    assert settings[0] == {
        "frequency_penalty": 0.5, "max_tokens": 24, "temperature": 0.0, "timeout": 3.0, "max_retries": 0
    }
    with pytest.raises(ValueError, match="max_tokens=0"):
        LLMRewriter(FunctionModel(reply), max_tokens=0, timeout_s=1.0)


def test_the_setting_chooses_the_rewrite() -> None:
    model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("x")]))
    assert build_rewriter(model, Settings(_env_file=None)) is None  # type: ignore[call-arg]
    chosen = Settings(  # type: ignore[call-arg]
        _env_file=None, followup_query="rewrite", followup_rewrite_timeout_s=2.5, followup_rewrite_max_tokens=16
    )
    rewriter = build_rewriter(model, chosen)
    assert rewriter is not None and rewriter.timeout_s == 2.5 and rewriter.settings["max_tokens"] == 16


def llm(rewrite: str | None, seen: list[list[ModelMessage]]) -> FunctionModel:
    """One model for both calls of an answer: the rewrite (a plain request; `rewrite` None: it never answers) and the
    agent's streamed answer (recorded in `seen`)."""

    async def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if rewrite is None:
            await asyncio.Event().wait()
        return ModelResponse(parts=[TextPart(rewrite or "")])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        seen.append(list(messages))
        yield "It raises it [1]."

    return FunctionModel(reply, stream_function=stream)


@pytest.mark.parametrize(("rewrite", "searched"), [(GOOD, GOOD), (None, CONDENSED)], ids=["rewritten", "timed-out"])
async def test_the_answer_searches_the_rewrite_and_answers_the_question(rewrite: str | None, searched: str) -> None:
    seen: list[list[ModelMessage]] = []
    model = llm(rewrite, seen)
    collection = InMemoryCollection(DOCUMENTS)
    timeout_s = 60.0 if rewrite else 0.05  # only the model that never answers meets the timeout
    deps = RagDeps(collection, 3, rewriter=LLMRewriter(model, max_tokens=16, timeout_s=timeout_s))
    agent = build_agent(model, {"max_tokens": 32}, "always")
    result = await answer(agent, deps, AnswerRequest(QUESTION, earlier_questions=EARLIER))
    assert collection.searches == [searched] and result.searches == [searched]
    assert QUESTION in str(seen[0][-1]) and GOOD not in str(seen[0][-1])  # the question asked is answered
    assert "rewrite" in result.timings_ms
    assert result.usage.requests == (2 if rewrite else 1)  # the rewrite's request and tokens are the answer's too


async def test_a_retrieval_query_wins_over_the_follow_up() -> None:
    seen: list[list[ModelMessage]] = []
    collection = InMemoryCollection(DOCUMENTS)
    rewriter = Rewriter()
    deps = RagDeps(collection, 3, rewriter=rewriter)
    agent = build_agent(llm(GOOD, seen), {"max_tokens": 32}, "always")
    request = AnswerRequest(QUESTION, earlier_questions=EARLIER, retrieval_query="homocysteine")
    result = await answer(agent, deps, request)
    assert collection.searches == ["homocysteine"] and rewriter.calls == [] and "rewrite" not in result.timings_ms


def test_a_rewrite_in_the_conversations_own_script_is_kept_and_one_in_another_language_is_not() -> None:
    chinese = ["维生素缺乏对老年人有影响吗？"]
    # a correct Chinese rewrite shares character bigrams (维生, 缺乏, ...) with the earlier turn: kept
    assert usable_rewrite("维生素缺乏与同型半胱氨酸", chinese, "那它对同型半胱氨酸有什么影响？") is not None
    german = ["Hat ein Vitamin-B12-Mangel bei älteren Menschen Folgen?"]
    follow_up = "und was bewirkt er beim Homocystein im Blut?"
    # an English rewrite of a German conversation searches English passages: not used
    assert usable_rewrite("vitamin B12 deficiency effects on homocysteine in older adults", german, follow_up) is None
    assert usable_rewrite("Vitamin-B12-Mangel Homocystein ältere Menschen", german, follow_up) is not None


def test_a_long_cjk_history_is_cut_to_the_same_share_of_the_embedder_window_as_an_english_one() -> None:
    question = "那它对同型半胱氨酸有什么影响？"
    history = ["维生素B12缺乏" * 200]  # 1,600 characters, ~1,600 embedder tokens
    query = condensed_query(history, question)
    han = sum(1 for ch in query if "\u4e00" <= ch <= "\u9fff")
    assert query.startswith(question) and han * 4 + (len(query) - han) <= 1000  # ~250 tokens, the question first
    english = condensed_query(["vitamin B12 deficiency " * 100], "and its homocysteine?")
    assert len(english) == 1000
