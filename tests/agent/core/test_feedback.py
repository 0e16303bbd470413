"""Feedback without servers: what an answer's record holds, rating through the Python API and `rag chat`, a record
write that fails or is slow never touching the answer, cached answers' own ids, and the export into a BEIR folder and
an answer case file the evals read (`evals.feedback_export`). Over HTTP: tests/agent/http/test_feedback_http.py; the
stores: tests/contracts/test_feedback_log.py; the real stack: tests/agent/http/test_feedback_stack.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.cli.chat import run_chat
from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.answer_cache import PROMPT_VERSION
from agent.core.app import RagApp
from agent.core.errors import InputError
from agent.core.feedback import AnswerNotFoundError, answer_id_of
from agent.core.wiring import Services
from evals.answers_eval import AnswerOutput, RatedAnswer, changed_since_rated, load_cases
from evals.beir import load_beir
from evals.feedback_export import doc_id_of, read_corpus, write_export
from tests.agent_corpus import COVERED, DOCUMENTS, OFF_TOPIC
from tests.conversation_rig import Model
from tests.scripted_console import ScriptedConsole
from tools.access import UNRESTRICTED, Access
from tools.errors import StoreUnavailableError
from tools.feedback import AnswerRecord, FeedbackQuery
from tools.in_memory import InMemoryCollection
from tools.in_memory_feedback import InMemoryFeedback
from tools.records import CacheLookup
from tools.scope import SearchScope


def app(feedback: Any = None, **settings: Any) -> tuple[RagApp, InMemoryCollection]:
    collection = InMemoryCollection(DOCUMENTS)
    services = Services(collection, collection, Model().model, feedback=feedback or InMemoryFeedback())
    return RagApp(_settings(settings), services), collection


def _settings(update: dict[str, Any]) -> Settings:
    return Settings.model_validate({"refusal_min_score": 0.3} | update)


async def test_the_record_holds_what_the_answer_rests_on_and_the_python_api_rates_it() -> None:
    rag, _ = app()
    scope = SearchScope.from_filter({"year": [2019]}, ["default"])
    result = await rag.ask(AnswerRequest(COVERED, top_k=3, scope=scope, owner="7"))
    record = await rag.feedback.record(result.answer_id, owner="7")
    assert record.question == COVERED and record.searches == [COVERED] and record.owner == "7"
    assert [p["chunk_id"] for p in record.retrieved] == [p.chunk_id for p in result.retrieved]
    assert [c["doc_id"] for c in record.cited] == [c.doc_id for c in result.citations]
    assert record.collections == ["default"] and record.scoped and record.filter == scope.to_filter()
    assert record.policy == "always" and record.top_k == 3 and record.prompts == PROMPT_VERSION
    assert record.settings["retrieval_mode"] == rag.settings.retrieval_mode and record.llm_model
    with pytest.raises(AnswerNotFoundError):  # another key: exactly a missing answer
        await rag.rate(result.answer_id, "up", owner="8")
    rated = await rag.rate(f"chatcmpl-{result.answer_id}", "down", comment=" wrong ", right_source="b12#0", owner="7")
    assert (rated.rating, rated.comment, rated.right_source) == ("down", "wrong", "b12#0")
    assert [r.answer_id for r in await rag.feedback.find(owner="7")] == [result.answer_id]
    for bad in ({"comment": "x" * 2001}, {"comment": "a\x00"}, {"right_source": "\x00"}):
        with pytest.raises(InputError):
            await rag.rate(result.answer_id, "up", **bad)
    with pytest.raises(InputError, match="answer_id"):
        answer_id_of("chatcmpl-nope")


class Failing(InMemoryFeedback):
    """A feedback store whose writes fail, or hang until `gate` opens."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        super().__init__()
        self.gate = gate

    async def remember(self, record: AnswerRecord, retention_days: int) -> None:
        if self.gate is None:
            raise StoreUnavailableError("postgres is down")
        await self.gate.wait()
        await super().remember(record, retention_days)


async def test_a_failing_or_slow_record_write_neither_fails_nor_slows_the_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rag, _ = app(Failing())
    result = await rag.ask(COVERED)
    assert result.answer and not result.refused
    await rag.feedback.settled()
    assert "could not store the feedback record" in caplog.text
    gate = asyncio.Event()
    slow, _ = app(Failing(gate))
    answered = await asyncio.wait_for(slow.ask(COVERED), timeout=10)  # the write waits; the answer does not
    rating = asyncio.ensure_future(slow.rate(answered.answer_id, "up"))  # a rating waits for its record
    await asyncio.sleep(0.05)
    assert not rating.done()
    gate.set()
    assert (await rating).rating == "up"


async def test_retention_zero_keeps_nothing_and_nothing_can_be_rated() -> None:
    feedback = InMemoryFeedback()
    rag, _ = app(feedback, feedback_retention_days=0)
    result = await rag.ask(COVERED)
    assert feedback.records == {}
    with pytest.raises(AnswerNotFoundError):
        await rag.rate(result.answer_id, "up")


class OneEntry:
    """An answer cache store of one entry."""

    def __init__(self) -> None:
        self.answer: dict[str, Any] | None = None

    async def lookup(
        self, digest: str, collections: Sequence[str] | None, *, access: Access = UNRESTRICTED
    ) -> CacheLookup:
        return CacheLookup("k", self.answer, True)

    async def store(self, key: str, answer: dict[str, Any], *, access: Access = UNRESTRICTED) -> None:
        self.answer = answer


async def test_a_cached_answer_gets_its_own_id_and_record_with_the_retrieved_passages() -> None:
    collection = InMemoryCollection(DOCUMENTS)
    feedback = InMemoryFeedback()
    services = Services(collection, collection, Model().model, answer_cache=OneEntry(), feedback=feedback)
    rag = RagApp(_settings({"answer_cache": True}), services)
    first, again = await rag.ask(COVERED), await rag.ask(COVERED)
    assert again.cached and again.answer_id != first.answer_id
    assert [p.chunk_id for p in again.retrieved] == [p.chunk_id for p in first.retrieved]
    await rag.feedback.settled()
    assert feedback.records[again.answer_id].cached and feedback.records[again.answer_id].retrieved


async def test_rag_chat_rates_the_last_answer() -> None:
    feedback = InMemoryFeedback()
    rag, _ = app(feedback)
    console = ScriptedConsole(
        echo=False, lines=["/up", COVERED, "/down wrong vitamin", "/source folate", OFF_TOPIC, "/up", ""]
    )
    await run_chat(rag, console)
    out = console.buffer.getvalue()
    assert "no answer to rate yet" in out and "rated down (answer" in out
    assert "rated down, right source folate" in out
    rated = {r.record.question: r for r in await feedback.find(FeedbackQuery())}
    assert (rated[COVERED].rating, rated[COVERED].comment, rated[COVERED].right_source) == (
        "down",
        "wrong vitamin",
        "folate",
    )
    assert rated[OFF_TOPIC].rating == "up" and rated[OFF_TOPIC].comment is None  # the second answer's own rating


async def test_the_export_is_a_beir_folder_and_a_case_file_without_keys(tmp_path: Path) -> None:
    rag, collection = app()
    good = await rag.ask(AnswerRequest(COVERED, owner="secret-key-id"))
    wrong = await rag.ask(AnswerRequest(OFF_TOPIC, owner="secret-key-id"))
    await rag.rate(good.answer_id, "up", comment="spot on")
    await rag.rate(wrong.answer_id, "down", comment="it is in b12", right_source="b12#0")
    ratings = await rag.feedback.find()

    async def read(doc_id: str, collections: Sequence[str]) -> tuple[str, str] | None:
        return await collection.get_document(doc_id)

    corpus, missing = await read_corpus(ratings, read)
    summary = write_export(ratings, corpus, missing, tmp_path)
    assert summary["judged_queries"] == 2 and summary["missing_documents"] == []
    beir = load_beir(tmp_path)
    cited = {c.doc_id for c in good.citations}
    assert beir.qrels[good.answer_id] == dict.fromkeys(cited, 1) and beir.qrels[wrong.answer_id] == {"b12": 2}
    assert {q.query_id for q in beir.queries} == {good.answer_id, wrong.answer_id}
    cases = {c.name: c for c in load_cases(tmp_path / "cases.yaml").cases}
    down = cases[wrong.answer_id]
    assert down.inputs.question == OFF_TOPIC and down.metadata is not None and down.metadata.gold_doc_ids == ["b12"]
    assert down.metadata.rated is not None and down.metadata.rated.refused
    assert "it is in b12" in (down.metadata.rated.what_was_wrong or "")
    up = cases[good.answer_id].metadata
    assert up is not None and up.rated is not None and up.rated.what_was_wrong is None
    written = [p.read_text() for p in sorted(tmp_path.rglob("*")) if p.is_file()]  # noqa: ASYNC240 - a test
    assert written and not any("secret-key-id" in text for text in written)  # no key, no owner
    assert doc_id_of("papers::a/b.md#3") == "a/b.md" and doc_id_of("b12") == "b12"


def test_a_run_reports_what_changed_since_the_rated_answer() -> None:
    rated = RatedAnswer(
        answer_id="a",
        rating="down",
        refused=True,
        retrieved_chunk_ids=["b12#0", "folate#0"],
    )
    same = AnswerOutput(
        verdict="NOT_ENOUGH_INFO",
        answer="",
        cited_doc_ids=[],
        refused=True,
        timings_ms={},
        retrieved_chunk_ids=["b12#0", "folate#0"],
    )
    assert changed_since_rated(rated, same)["changed"] is False
    now = same.model_copy(
        update={
            "refused": False,
            "cited_doc_ids": ["b12"],
            "cited_chunk_ids": ["b12#0"],
            "retrieved_chunk_ids": ["b12#0"],
        }
    )
    changes = changed_since_rated(rated, now)
    assert changes["changed"] and changes["refused"] == {"then": True, "now": False}
    assert changes["retrieved_chunk_ids"] == {"added": [], "removed": ["folate#0"]}
    assert changes["cited_doc_ids"] == {"added": ["b12"], "removed": []}
