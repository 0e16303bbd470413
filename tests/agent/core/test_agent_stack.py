"""The agent on the real retriever (Triton + Postgres), pydantic-ai's FunctionModel in place of the LLM: what only
the real stack shows. The agent's logic itself is tested without servers in test_agent_logic.py."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

import asyncpg
import numpy as np
import numpy.typing as npt
import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.core.answer import AnswerLimits, AnswerRequest, answer
from agent.core.errors import AnswerLimitError
from agent.core.prompts import REFUSAL
from agent.core.rag_agent import RagDeps, build_agent
from agent.core.results import AskResult
from evals.off_topic import OFF_TOPIC as OFF_TOPIC_QUESTIONS
from tools.embedder import TritonEmbedder
from tools.records import TextKind
from tools.retrieval import Retriever
from tools.retrieval_config import RETRIEVAL_MODES, RetrievalConfig, RetrievalMode
from tools.store import VectorStore

# SciFact test claim 36's gold abstract (tests/conftest.py GOLD_CLAIMS) is in the test corpus.
COVERED = "Vitamin B12 deficiency and homocysteine levels"
OFF_TOPIC = OFF_TOPIC_QUESTIONS[0]  # "Who won the 2018 FIFA World Cup?"
REFUSAL_MIN_SCORE = 0.42  # the default of Settings.refusal_min_score (evals/refusal.py)


def model(text: str, seen: list[list[ModelMessage]]) -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        seen.append(list(messages))
        yield text

    return FunctionModel(stream_function=stream)


async def run(
    text: str,
    retriever: Retriever,
    question: str = COVERED,
    seen: list[list[ModelMessage]] | None = None,
    timeout_s: float | None = None,
) -> AskResult:
    agent = build_agent(model(text, [] if seen is None else seen), {"max_tokens": 64}, "always")
    deps = RagDeps(retriever, 3, REFUSAL_MIN_SCORE)
    return await answer(agent, deps, AnswerRequest(question), AnswerLimits(timeout_s=timeout_s))


class CountingEmbedder:
    """The real embedder, counting its calls."""

    def __init__(self, embedder: TritonEmbedder) -> None:
        self.embedder = embedder
        self.calls = 0

    async def embed(self, texts: Sequence[str], kind: TextKind = "document") -> npt.NDArray[np.float32]:
        self.calls += 1
        return await self.embedder.embed(texts, kind=kind)


async def test_always_policy_cites_the_chunks_retrieved_for_it(store: VectorStore, embedder: TritonEmbedder) -> None:
    seen: list[list[ModelMessage]] = []
    result = await run("It does [1], per [2] and [42].", Retriever(embedder, store), seen=seen)
    retrieved = await Retriever(embedder, store).search(COVERED, 3)
    assert [c.chunk_id for c in result.citations] == [p.chunk_id for p in retrieved.passages[:2]]
    assert result.dropped_citations == ["[42]"] and "[3]" in str(seen[0][-1])
    assert result.timings_ms["embed"] > 0 and result.timings_ms["search"] > 0


@pytest.mark.parametrize("mode", RETRIEVAL_MODES)
async def test_refusal_works_in_every_retrieval_mode(
    mode: RetrievalMode, store: VectorStore, embedder: TritonEmbedder
) -> None:
    counting = CountingEmbedder(embedder)
    retriever = Retriever(counting, store, RetrievalConfig(mode=mode))
    covered = await run("It does [1].", retriever)
    assert not covered.refused and [c.passage for c in covered.citations] == [1]
    seen: list[list[ModelMessage]] = []
    off_topic = await run("Argentina won [1].", retriever, question=OFF_TOPIC, seen=seen)
    assert off_topic.refused and off_topic.answer == REFUSAL and seen == []
    assert counting.calls == 2  # one query embedding per answer, in every mode


@pytest.mark.parametrize("mode", RETRIEVAL_MODES)
async def test_every_passage_gets_its_dense_cosine(
    mode: RetrievalMode, store: VectorStore, embedder: TritonEmbedder
) -> None:
    found = await Retriever(embedder, store, RetrievalConfig(mode=mode)).search(COVERED, 5)
    query = (await embedder.embed([COVERED], kind="query"))[0]
    exact = {h.chunk_id: h.score for h in await store.dense_search(query, 1000, exact=True)}
    assert found.passages
    for p in found.passages:
        assert p.dense_score == pytest.approx(exact[p.chunk_id], abs=1e-4), (mode, p.chunk_id)


async def test_answer_timeout_covers_retrieval(store: VectorStore, embedder: TritonEmbedder, ingested: str) -> None:
    # A retrieval that hangs (the chunks table locked by another session) ends at ANSWER_TIMEOUT_S.
    locker = await asyncpg.connect(ingested)
    try:
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")
        start = time.perf_counter()
        with pytest.raises(AnswerLimitError, match=r"longer than 1.0 s .*retrieval included") as exc:
            await run("never asked", Retriever(embedder, store), timeout_s=1.0)
        assert exc.value.limit == "timeout" and time.perf_counter() - start < 60  # not held until the lock goes
        await transaction.rollback()
    finally:
        await locker.close()
    assert not (await run("It does [1].", Retriever(embedder, store), timeout_s=60.0)).refused  # the pool still works
