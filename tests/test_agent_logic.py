"""Agent logic with pydantic-ai's FunctionModel in place of the LLM, on the real retriever (Triton + Postgres).
The real LLM is tested in test_agent_real_llm.py and test_cli.py; the pure citation and prompt logic in
test_citations_prompts.py."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent.errors import AnswerLimitError, LLMResponseError
from agent.events import AgentEvent, AnswerRestart, TextDelta, ToolCall
from agent.prompts import REFUSAL
from agent.rag_agent import RagDeps, answer, build_agent
from agent.results import AskResult
from agent.settings import Policy
from evals.off_topic import OFF_TOPIC as OFF_TOPIC_QUESTIONS
from tools.embedder import TritonEmbedder
from tools.retrieval import RetrievalMode, Retriever
from tools.store import VectorStore

# SciFact test claim 36's gold abstract (tests/conftest.py GOLD_CLAIMS) is in the test corpus.
COVERED = "Vitamin B12 deficiency and homocysteine levels"
OFF_TOPIC = OFF_TOPIC_QUESTIONS[0]  # "Who won the 2018 FIFA World Cup?"
REFUSAL_MIN_SCORE = 0.42  # the default of Settings.refusal_min_score (evals/refusal.py)

pytestmark = pytest.mark.stack

Call = tuple[str, dict[str, Any]]
Step = str | Call | list[Call]  # text, a tool call, or parallel tool calls


def scripted(steps: list[Step], seen: list[list[ModelMessage]]) -> FunctionModel:
    """A streaming FunctionModel that plays `steps` in order: text (streamed in pieces) or a (tool, args) call."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        seen.append(list(messages))
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
    store: VectorStore,
    embedder: TritonEmbedder,
    question: str = COVERED,
    policy: Policy = "always",
    events: list[AgentEvent] | None = None,
    seen: list[list[ModelMessage]] | None = None,
    on_text: Callable[[str], None] | None = None,
    mode: RetrievalMode = "hybrid",
    refusal_min_score: float = REFUSAL_MIN_SCORE,
    timeout_s: float | None = None,
) -> AskResult:
    seen = [] if seen is None else seen
    agent = build_agent(scripted(steps, seen), {"max_tokens": 64}, policy)
    on_event = None if events is None else events.append
    deps = RagDeps(Retriever(embedder, store, mode=mode), 3, refusal_min_score, on_event)
    return await answer(agent, deps, question, policy=policy, on_text=on_text, timeout_s=timeout_s)


async def test_always_policy_cites_only_retrieved_chunks(store: VectorStore, embedder: TritonEmbedder) -> None:
    seen: list[list[ModelMessage]] = []
    streamed: list[str] = []
    result = await run(
        ["<think>hmm [9]</think>It does [1], per [2] and [42]."], store, embedder, seen=seen, on_text=streamed.append
    )
    prompt = str(seen[0][-1])
    assert "[1]" in prompt and "[3]" in prompt and "[4]" not in prompt
    assert [c.passage for c in result.citations] == [1, 2]
    assert "[42]" not in result.answer and "think" not in result.answer
    assert "".join(streamed) == result.answer == "It does [1], per [2] and."  # the invalid marker was never shown
    assert result.dropped_citations == ["[42]"]
    assert set(result.timings_ms) == {"embed", "search", "llm", "llm_ttft", "total"}
    assert 0 < result.timings_ms["llm_ttft"] <= result.timings_ms["llm"] <= result.timings_ms["total"]
    assert result.searches == [COVERED] and not result.refused and result.policy == "always"
    retrieved = await Retriever(embedder, store).search(COVERED, 3)
    assert [c.chunk_id for c in result.citations] == [p.chunk_id for p in retrieved.passages[:2]]


async def test_uncovered_question_is_refused_without_calling_the_model(
    store: VectorStore, embedder: TritonEmbedder
) -> None:
    seen: list[list[ModelMessage]] = []
    result = await run(["Argentina won [1]."], store, embedder, question=OFF_TOPIC, seen=seen)
    assert result.refused and result.answer == REFUSAL and result.citations == []
    assert seen == [] and result.timings_ms["llm"] == 0.0
    best = max(p.dense_score or -1 for p in (await Retriever(embedder, store).search(OFF_TOPIC, 3)).passages)
    assert best < REFUSAL_MIN_SCORE


async def test_agentic_policy_searches_numbers_run_wide_and_validates(
    store: VectorStore, embedder: TritonEmbedder
) -> None:
    events: list[AgentEvent] = []
    seen: list[list[ModelMessage]] = []
    steps: list[Step] = [
        "Let me search.",  # an answer before any search: sent back once
        ("search_documents", {"query": "vitamin B12 homocysteine", "top_k": 2}),
        ("search_documents", {"query": "homocysteine vitamin B12 deficiency", "top_k": 40}),  # clamped to 10
        ("get_document", {"doc_id": "not-retrieved"}),
        "B12 deficiency raises homocysteine [1] [3] [99].",
    ]
    result = await run(steps, store, embedder, policy="agentic", events=events, seen=seen)
    assert result.searches == ["vitamin B12 homocysteine", "homocysteine vitamin B12 deficiency"]
    first = await Retriever(embedder, store).search("vitamin B12 homocysteine", 2)
    assert result.citations[0].chunk_id == first.passages[0].chunk_id  # [1] keeps its number in the 2nd search
    assert [c.passage for c in result.citations] == [1, 3] and "[99]" not in result.answer
    second_result = next(p for p in seen[3][-1].parts if isinstance(p, ToolReturnPart))
    assert str(second_result.content).count("\n[") == 10
    assert "was not in your search results" in str(seen[4][-1])  # get_document's retry prompt
    assert [e.tool for e in events if isinstance(e, ToolCall)] == ["search_documents", "search_documents"]
    assert isinstance(events[0], TextDelta) and any(isinstance(e, AnswerRestart) for e in events)
    after_restart = events[max(i for i, e in enumerate(events) if isinstance(e, AnswerRestart)) + 1 :]
    assert "".join(e.text for e in after_restart if isinstance(e, TextDelta)).startswith("B12 deficiency")


async def test_agentic_answer_from_general_knowledge_is_refused(store: VectorStore, embedder: TritonEmbedder) -> None:
    events: list[AgentEvent] = []
    seen: list[list[ModelMessage]] = []
    result = await run(["Paris [1].", "Still Paris [1]."], store, embedder, policy="agentic", events=events, seen=seen)
    assert len(seen) == 2  # sent back once: "You have not searched yet"
    assert "You have not searched yet" in str(seen[1][-1])
    assert result.refused and result.answer == REFUSAL and result.citations == [] and result.searches == []
    assert isinstance(events[-2], AnswerRestart) and events[-1] == TextDelta(text=REFUSAL)


@pytest.mark.parametrize("policy", ["always", "agentic"])
async def test_blank_question_is_a_value_error(policy: Policy, store: VectorStore, embedder: TritonEmbedder) -> None:
    with pytest.raises(ValueError, match="question is empty"):
        await run(["x"], store, embedder, question="  ", policy=policy)


@pytest.mark.parametrize("mode", ["dense", "full_text", "hybrid"])
async def test_refusal_works_in_every_retrieval_mode(
    mode: RetrievalMode, store: VectorStore, embedder: TritonEmbedder
) -> None:
    covered = await run(["It does [1]."], store, embedder, mode=mode)
    assert not covered.refused and [c.passage for c in covered.citations] == [1]
    seen: list[list[ModelMessage]] = []
    off_topic = await run(["Argentina won [1]."], store, embedder, question=OFF_TOPIC, seen=seen, mode=mode)
    assert off_topic.refused and off_topic.answer == REFUSAL and seen == []
    # -1 turns refusal off, whatever scores the mode's passages carry.
    unguarded = await run(["Argentina won."], store, embedder, question=OFF_TOPIC, mode=mode, refusal_min_score=-1.0)
    assert not unguarded.refused and unguarded.answer == "Argentina won."


async def test_full_text_passages_get_their_stored_dense_cosine(store: VectorStore, embedder: TritonEmbedder) -> None:
    found = await Retriever(embedder, store, mode="full_text").search(COVERED, 3)
    assert found.passages and all(p.dense_score is None for p in found.passages)
    query = (await embedder.embed([COVERED], kind="query"))[0]
    cosines = await store.cosine_similarities(query, [p.chunk_id for p in found.passages])
    exact = {h.chunk_id: h.score for h in await store.dense_search(query, 1000, exact=True)}
    assert cosines == pytest.approx({cid: exact[cid] for cid in cosines}, abs=1e-5)
    assert max(cosines.values()) >= REFUSAL_MIN_SCORE


STREAMED_OUTPUTS = [
    ("It does [1], per [2] and [42].", ["[42]"]),
    ("The claim holds [doc 99999], see (doc 4242) .", ["[doc 99999]", "(doc 4242)"]),
    ("Yes [9], [8], [1].", ["[9]", "[8]"]),
    ("<think>plan [3]</think>Answer [1] [5].", ["[5]"]),
    ("Plain answer without markers", []),
]


@pytest.mark.parametrize(("output", "dropped"), STREAMED_OUTPUTS)
async def test_streamed_text_equals_the_final_answer(
    output: str, dropped: list[str], store: VectorStore, embedder: TritonEmbedder
) -> None:
    streamed: list[str] = []
    events: list[AgentEvent] = []
    result = await run([output], store, embedder, on_text=streamed.append, events=events)
    assert "".join(streamed) == result.answer
    assert not any(isinstance(e, AnswerRestart) for e in events)
    assert result.dropped_citations == dropped
    assert not any(marker in result.answer for marker in dropped)
    assert ",," not in result.answer and " ." not in result.answer and " ," not in result.answer


async def test_reasoning_opened_in_the_prompt_is_stripped_from_stream_and_answer(
    store: VectorStore, embedder: TritonEmbedder
) -> None:
    events: list[AgentEvent] = []
    output = "The user asks about B12; passage 1 covers it.</think>\n\nB12 deficiency raises homocysteine [1]."
    result = await run([output], store, embedder, events=events)
    assert result.answer == "B12 deficiency raises homocysteine [1]."
    last_restart = max(i for i, e in enumerate(events) if isinstance(e, AnswerRestart))
    assert "".join(e.text for e in events[last_restart:] if isinstance(e, TextDelta)) == result.answer


async def test_parallel_tool_calls_sharing_an_id_are_re_identified(
    store: VectorStore, embedder: TritonEmbedder
) -> None:
    seen: list[list[ModelMessage]] = []
    steps: list[Step] = [
        [("search_documents", {"query": "vitamin B12 homocysteine"}), ("search_documents", {"query": "homocysteine"})],
        "B12 deficiency raises homocysteine [1].",
    ]
    result = await run(steps, store, embedder, policy="agentic", seen=seen)
    assert sorted(result.searches) == ["homocysteine", "vitamin B12 homocysteine"]
    returns = [p for p in seen[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert len(returns) == 2 and len({p.tool_call_id for p in returns}) == 2


async def test_model_misbehaviour_is_reported_by_its_cause(store: VectorStore, embedder: TritonEmbedder) -> None:
    steps: list[Step] = [("no_such_tool", {}), ("no_such_tool", {}), ("no_such_tool", {})]
    with pytest.raises(LLMResponseError) as exc:
        await run(steps, store, embedder, policy="agentic")
    assert "no_such_tool" in str(exc.value) and "choices" not in str(exc.value)


async def test_answer_timeout_covers_retrieval(store: VectorStore, embedder: TritonEmbedder, ingested: str) -> None:
    # A retrieval that hangs (the chunks table locked by another session) ends at ANSWER_TIMEOUT_S.
    locker = await asyncpg.connect(ingested)
    try:
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")
        start = time.perf_counter()
        with pytest.raises(AnswerLimitError, match=r"longer than 1.0 s .*retrieval included") as exc:
            await run(["never asked"], store, embedder, timeout_s=1.0)
        assert exc.value.limit == "timeout" and time.perf_counter() - start < 5
        await transaction.rollback()
    finally:
        await locker.close()
    assert not (await run(["It does [1]."], store, embedder, timeout_s=60.0)).refused  # the pool still works
