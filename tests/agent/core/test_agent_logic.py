"""The agent's logic without servers: pydantic-ai's FunctionModel in place of the LLM and the in-memory collection
(`tools.in_memory.InMemoryCollection`) in place of Triton and Postgres. Limits, refusal in every retrieval mode,
streamed text equal to the answer, timeouts, citations, tool-call ids. The same behaviours against the real
retriever: test_agent_stack.py; against an OpenAI-compatible server: test_agent_llm_server.py."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import UsageLimits

from agent.config.settings import Policy
from agent.core.answer import AnswerLimits, AnswerRequest, answer
from agent.core.errors import AnswerLimitError, InputError, LLMResponseError
from agent.core.events import AgentEvent, AnswerRestart, TextDelta, ToolCall, ToolResult
from agent.core.prompts import REFUSAL
from agent.core.rag_agent import RagDeps, build_agent, shown_in
from agent.core.results import AskResult
from tests.agent_corpus import COVERED, DOCUMENTS, OFF_TOPIC
from tools.in_memory import InMemoryCollection
from tools.retrieval import Passage
from tools.retrieval_config import RETRIEVAL_MODES, RetrievalConfig, RetrievalMode
from tools.scope import SearchScope

REFUSAL_MIN_SCORE = 0.3  # hashed bag-of-words cosine: COVERED vs the B12 document ~0.5, OFF_TOPIC vs any 0.0

Call = tuple[str, dict[str, Any]]
Step = str | Call | list[Call]  # text, a tool call, or parallel tool calls


def scripted(steps: list[Step], seen: list[list[ModelMessage]], gate: asyncio.Event | None = None) -> FunctionModel:
    """A streaming FunctionModel that plays `steps` in order: text (streamed in pieces of 7 characters) or a (tool,
    args) call; with `gate`, every step waits for it first."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        seen.append(list(messages))
        if gate is not None:
            await gate.wait()
        step = steps.pop(0)
        if isinstance(step, tuple):
            yield {0: DeltaToolCall(name=step[0], json_args=json.dumps(step[1]), tool_call_id=f"call{len(seen)}")}
        elif isinstance(step, list):  # parallel calls sharing one id, as some servers send them
            yield {
                i: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id="same")
                for i, (name, args) in enumerate(step)
            }
        else:
            for i in range(0, len(step), 7):
                yield step[i : i + 7]

    return FunctionModel(stream_function=stream)


async def run(
    steps: list[Step],
    question: str = COVERED,
    policy: Policy = "always",
    events: list[AgentEvent] | None = None,
    seen: list[list[ModelMessage]] | None = None,
    on_text: Callable[[str], None] | None = None,
    mode: RetrievalMode = "hybrid",
    refusal_min_score: float = REFUSAL_MIN_SCORE,
    limits: AnswerLimits | None = None,
    collection: InMemoryCollection | None = None,
    gate: asyncio.Event | None = None,
) -> AskResult:
    seen = [] if seen is None else seen
    agent = build_agent(scripted(steps, seen, gate), {"max_tokens": 64}, policy)
    deps = RagDeps(collection or InMemoryCollection(DOCUMENTS, RetrievalConfig(mode=mode)), 3, refusal_min_score)
    on_event = None if events is None else events.append
    request = AnswerRequest(question, policy=policy, on_event=on_event, on_text=on_text)
    return await answer(agent, deps, request, limits)


async def test_always_policy_cites_only_retrieved_chunks() -> None:
    seen: list[list[ModelMessage]] = []
    streamed: list[str] = []
    result = await run(["<think>hmm [9]</think>It does [1], per [2] and [42]."], seen=seen, on_text=streamed.append)
    prompt = str(seen[0][-1])
    assert "[1]" in prompt and "[3]" in prompt and "[4]" not in prompt
    assert [c.passage for c in result.citations] == [1, 2]
    assert [c.doc_id for c in result.citations] == ["b12", "folate"]
    assert "[42]" not in result.answer and "think" not in result.answer
    assert "".join(streamed) == result.answer == "It does [1], per [2] and."  # the invalid marker was never shown
    assert result.dropped_citations == ["[42]"]
    assert set(result.timings_ms) == {"embed", "search", "llm", "llm_ttft", "total"}
    assert 0 < result.timings_ms["llm_ttft"] <= result.timings_ms["llm"] <= result.timings_ms["total"]
    assert result.searches == [COVERED] and not result.refused and result.policy == "always"


async def test_uncovered_question_is_refused_without_calling_the_model() -> None:
    seen: list[list[ModelMessage]] = []
    events: list[AgentEvent] = []
    result = await run(["Argentina won [1]."], question=OFF_TOPIC, seen=seen, events=events)
    assert result.refused and result.answer == REFUSAL and result.citations == []
    assert seen == [] and result.timings_ms["llm"] == 0.0 and "llm_ttft" not in result.timings_ms
    assert events[-1] == TextDelta(text=REFUSAL)


@pytest.mark.parametrize("mode", RETRIEVAL_MODES)
async def test_refusal_works_in_every_retrieval_mode(mode: RetrievalMode) -> None:
    covered = await run(["It does [1]."], mode=mode)
    assert not covered.refused and [c.doc_id for c in covered.citations] == ["b12"]
    seen: list[list[ModelMessage]] = []
    off_topic = await run(["Argentina won [1]."], question=OFF_TOPIC, seen=seen, mode=mode)
    assert off_topic.refused and off_topic.answer == REFUSAL and seen == []
    # A question whose only word in common with the documents is one full-text match: the passage full-text search
    # finds still carries its dense cosine, so the refusal decision is the same in every mode.
    weak = await run(["Cells [1]."], question="Who discovered stem cells in the 1960s?", mode=mode)
    assert weak.refused
    # -1 turns refusal off, whatever scores the mode's passages carry.
    unguarded = await run(["Argentina won."], question=OFF_TOPIC, mode=mode, refusal_min_score=-1.0)
    assert not unguarded.refused and unguarded.answer == "Argentina won."


async def test_every_passage_carries_its_dense_cosine_in_every_mode() -> None:
    for mode in RETRIEVAL_MODES:
        found = await InMemoryCollection(DOCUMENTS, RetrievalConfig(mode=mode)).search(COVERED, 3)
        assert found.passages and all(p.dense_score is not None for p in found.passages), mode
        assert found.passages[0].doc_id == "b12" and found.passages[0].dense_score > REFUSAL_MIN_SCORE  # type: ignore[operator]


async def test_agentic_policy_searches_numbers_run_wide_and_validates() -> None:
    events: list[AgentEvent] = []
    seen: list[list[ModelMessage]] = []
    steps: list[Step] = [
        "Let me search.",  # an answer before any search: sent back once
        ("search_documents", {"query": "vitamin B12 homocysteine", "top_k": 2}),
        ("search_documents", {"query": "homocysteine folate adults", "top_k": 40}),  # clamped to 10
        ("get_document", {"doc_id": "not-retrieved"}),
        ("get_document", {"doc_id": "b12"}),
        "B12 deficiency raises homocysteine [1] [3] [99].",
    ]
    collection = InMemoryCollection(DOCUMENTS)
    result = await run(steps, policy="agentic", events=events, seen=seen, collection=collection)
    assert result.searches == collection.searches == ["vitamin B12 homocysteine", "homocysteine folate adults"]
    first = await InMemoryCollection(DOCUMENTS).search("vitamin B12 homocysteine", 2)
    assert result.citations[0].doc_id == first.passages[0].doc_id == "b12"  # [1] kept its number in the 2nd search
    assert result.citations[1].doc_id not in {p.doc_id for p in first.passages}  # [3]: new in the second search
    assert [c.passage for c in result.citations] == [1, 3] and "[99]" not in result.answer
    assert result.dropped_citations == ["[99]"]
    second = next(p for p in seen[3][-1].parts if isinstance(p, ToolReturnPart))
    assert str(second.content).count("\n[") == len(DOCUMENTS)  # top_k 40 clamped to 10: every document
    assert "was not in your search results" in str(seen[4][-1])  # get_document's retry prompt
    document = next(p for p in seen[5][-1].parts if isinstance(p, ToolReturnPart))
    assert "Vitamin B12 deficiency raises plasma homocysteine" in str(document.content)
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [e.tool for e in calls] == ["search_documents", "search_documents", "get_document"]
    assert any(isinstance(e, ToolResult) and e.summary.startswith("2 passages [1], [2]") for e in events)
    assert isinstance(events[0], TextDelta) and any(isinstance(e, AnswerRestart) for e in events)
    after_restart = events[max(i for i, e in enumerate(events) if isinstance(e, AnswerRestart)) + 1 :]
    assert "".join(e.text for e in after_restart if isinstance(e, TextDelta)) == result.answer


async def test_agentic_answer_from_general_knowledge_is_refused() -> None:
    events: list[AgentEvent] = []
    seen: list[list[ModelMessage]] = []
    result = await run(["Paris [1].", "Still Paris [1]."], policy="agentic", events=events, seen=seen)
    assert len(seen) == 2  # sent back once: "You have not searched yet"
    assert "You have not searched yet" in str(seen[1][-1])
    assert result.refused and result.answer == REFUSAL and result.citations == [] and result.searches == []
    assert isinstance(events[-2], AnswerRestart) and events[-2].reason == "refusal"
    assert events[-1] == TextDelta(text=REFUSAL)


async def test_blank_tool_query_is_sent_back_to_the_model() -> None:
    seen: list[list[ModelMessage]] = []
    steps: list[Step] = [("search_documents", {"query": "  "}), ("search_documents", {"query": "B12"}), "Yes [1]."]
    result = await run(steps, policy="agentic", seen=seen)
    assert "query is empty" in str(seen[1][-1]) and result.searches == ["B12"]
    assert [c.doc_id for c in result.citations] == ["b12"]


@pytest.mark.parametrize("policy", ["always", "agentic"])
@pytest.mark.parametrize(("question", "top_k", "needle"), [("  ", None, "question is empty"), ("q", 0, "top_k=0")])
def test_bad_requests_are_input_errors(policy: Policy, question: str, top_k: int | None, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        AnswerRequest(question, top_k=top_k, policy=policy)


STREAMED_OUTPUTS = [
    ("It does [1], per [2] and [42].", ["[42]"]),
    ("The claim holds [doc 99999], see (doc 4242) .", ["[doc 99999]", "(doc 4242)"]),
    ("Yes [9], [8], [1].", ["[9]", "[8]"]),
    ("<think>plan [3]</think>Answer [1] [5].", ["[5]"]),
    ("Plain answer without markers", []),
    ("Per (doc b12) and [doc folate], yes.", []),
]


@pytest.mark.parametrize(("output", "dropped"), STREAMED_OUTPUTS)
async def test_streamed_text_equals_the_final_answer(output: str, dropped: list[str]) -> None:
    streamed: list[str] = []
    events: list[AgentEvent] = []
    result = await run([output], on_text=streamed.append, events=events)
    assert "".join(streamed) == result.answer
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == result.answer
    assert not any(isinstance(e, AnswerRestart) for e in events)
    assert result.dropped_citations == dropped
    assert not any(marker in result.answer for marker in dropped)
    assert ",," not in result.answer and " ." not in result.answer and " ," not in result.answer


async def test_document_markers_become_passage_citations() -> None:
    result = await run(["Per (doc b12) and [doc folate], yes."])
    assert result.answer == "Per [1] and [2], yes."
    assert [(c.passage, c.doc_id) for c in result.citations] == [(1, "b12"), (2, "folate")]


async def test_reasoning_opened_in_the_prompt_is_stripped_from_stream_and_answer() -> None:
    events: list[AgentEvent] = []
    output = "The user asks about B12; passage 1 covers it.</think>\n\nB12 deficiency raises homocysteine [1]."
    result = await run([output], events=events)
    assert result.answer == "B12 deficiency raises homocysteine [1]."
    restarts = [i for i, e in enumerate(events) if isinstance(e, AnswerRestart)]
    assert restarts and all(e.reason == "revised" for e in events if isinstance(e, AnswerRestart))
    assert "".join(e.text for e in events[restarts[-1] :] if isinstance(e, TextDelta)) == result.answer


async def test_parallel_tool_calls_sharing_an_id_are_re_identified() -> None:
    seen: list[list[ModelMessage]] = []
    steps: list[Step] = [
        [("search_documents", {"query": "vitamin B12 homocysteine"}), ("search_documents", {"query": "folate"})],
        "B12 deficiency raises homocysteine [1].",
    ]
    result = await run(steps, policy="agentic", seen=seen)
    assert sorted(result.searches) == ["folate", "vitamin B12 homocysteine"]
    returns = [p for p in seen[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert len(returns) == 2 and len({p.tool_call_id for p in returns}) == 2
    assert sorted(p.tool_call_id == "same" for p in returns) == [False, True]  # the repeat got a fresh id


async def test_model_misbehaviour_is_reported_by_its_cause() -> None:
    steps: list[Step] = [("no_such_tool", {}), ("no_such_tool", {}), ("no_such_tool", {})]
    with pytest.raises(LLMResponseError) as exc:
        await run(steps, policy="agentic")
    assert "no_such_tool" in str(exc.value) and "choices" not in str(exc.value)


async def test_only_reasoning_is_a_response_error() -> None:
    with pytest.raises(LLMResponseError, match="no answer text"):
        await run(["<think>only reasoning</think>"])


@pytest.mark.parametrize(
    ("usage", "kind", "needle"),
    [
        (UsageLimits(request_limit=2), "requests", "more than 2 LLM requests (AGENT_REQUEST_LIMIT)"),
        (UsageLimits(tool_calls_limit=1), "tool_calls", "more than 1 tool calls (AGENT_TOOL_CALLS_LIMIT)"),
        (UsageLimits(total_tokens_limit=5), "tokens", "token budget of 5 tokens (ANSWER_TOKEN_BUDGET)"),
    ],
)
async def test_limits_give_typed_errors(usage: UsageLimits, kind: str, needle: str) -> None:
    search: Step = ("search_documents", {"query": "homocysteine"})
    with pytest.raises(AnswerLimitError, match=re.escape(needle)) as exc:
        await run([search] * 5, policy="agentic", limits=AnswerLimits(usage=usage))
    assert exc.value.limit == kind


async def test_answer_timeout_covers_the_whole_answer() -> None:
    gate = asyncio.Event()  # never set: the model never answers
    with pytest.raises(AnswerLimitError, match=r"longer than 0.2 s \(ANSWER_TIMEOUT_S\), retrieval included") as exc:
        await run(["never sent"], limits=AnswerLimits(timeout_s=0.2), gate=gate)
    assert exc.value.limit == "timeout"


async def test_a_timeout_inside_the_model_is_not_the_answer_timeout() -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        raise TimeoutError("the model's own clock")
        yield ""

    agent = build_agent(FunctionModel(stream_function=stream), {"max_tokens": 8}, "always")
    deps = RagDeps(InMemoryCollection(DOCUMENTS), 3, REFUSAL_MIN_SCORE)
    with pytest.raises(TimeoutError, match="the model's own clock"):
        await answer(agent, deps, AnswerRequest(COVERED), AnswerLimits(timeout_s=30.0))


async def test_history_reaches_the_model_and_retrieval_query_the_search() -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    seen: list[list[ModelMessage]] = []
    collection = InMemoryCollection(DOCUMENTS)
    agent = build_agent(scripted(["Yes [1]."], seen), {"max_tokens": 64}, "always")
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("earlier")]), ModelResponse([TextPart("ok")])]
    request = AnswerRequest("Answer SUPPORT or REFUTE: " + COVERED, retrieval_query=COVERED, history=history)
    result = await answer(agent, RagDeps(collection, 3, REFUSAL_MIN_SCORE), request)
    assert collection.searches == [COVERED] and result.searches == [COVERED]
    assert "earlier" in str(seen[0][0]) and "Answer SUPPORT or REFUTE" in str(seen[0][-1])


def test_get_document_reads_the_collection_its_search_result_came_from() -> None:
    """A key that sees collections a and b may find `guide.md` in both: the agent reads the one its search showed
    first (named by the passage's chunk id), within the run's filters."""
    deps = RagDeps(InMemoryCollection([]), 3, scope=SearchScope.from_filter({"team": "bio"}, ["a", "b"]))
    shown = [("b::guide.md#2", "guide.md"), ("a::guide.md#0", "guide.md"), ("default-doc#0", "default-doc")]
    for number, (chunk, doc_id) in enumerate(shown, start=1):
        deps.state.by_chunk[chunk] = Passage(chunk, doc_id, "t", "x", "", 0.5, number=number)
    narrowed = shown_in(deps, "guide.md")
    assert narrowed == SearchScope.from_filter({"team": "bio"}, ["b"])
    assert shown_in(deps, "default-doc") == SearchScope.from_filter({"team": "bio"}, ["default"])
    assert shown_in(deps, "never-shown") == deps.scope
