"""The answer cache end to end on the real stack (Triton, Postgres) with the fake OpenAI server as the LLM: a repeated
question is answered from the cache with the same answer and citations and no LLM request, on every interface; any
ingest, replace or delete in the scope is answered afresh; other scopes and options miss; conversations bypass it;
expired entries and a cache turned off never hit."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from agent.config.settings import Settings
from agent.core.answer_cache import CACHE_TOTAL
from agent.core.app import RagApp
from agent.http import create_app
from agent.http.deps import get_rag
from tests.conftest import cli_env
from tests.fake_openai import FakeOpenAIServer, Reply
from tests.http_rig import sse_events
from tools.ingest import SourceDocument
from tools.store.answer_cache import PostgresAnswerCache

pytestmark = pytest.mark.stack

SCRATCH = (
    "Scratch space for temporary files on the cluster nodes lives under /tmp and /var/tmp. It is wiped whenever a "
    "node reboots, so jobs must copy their results to the shared file system before they finish."
)
QUEUE = "Batch jobs wait in the slurm queue named long when they ask for more than four hours of wall time."
COFFEE = "The coffee machine on the third floor is descaled every Friday morning by the facilities team."
QUESTION = "Where does the scratch space for temporary files live on the cluster nodes?"


def doc(doc_id: str, text: str) -> SourceDocument:
    return SourceDocument(doc_id, doc_id.title(), text, f"{doc_id}.txt", {})


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def cached_settings(settings: Settings, fake: FakeOpenAIServer, database_url: str, **update: Any) -> Settings:
    fields = {
        "database_url": database_url,
        "llm_base_url": fake.base_url,
        "vllm_port": fake.port,
        "llm_model": "fake",
        "llm_max_retries": 0,
        "refusal_min_score": 0.3,
        "answer_cache": True,
    }
    return settings.model_copy(update=fields | update)


class Rig:
    """An opened app over the stack, served in-process, and the fake LLM's recorded requests."""

    def __init__(self, rag: RagApp, fake: FakeOpenAIServer) -> None:
        self.rag, self.fake = rag, fake
        app = create_app(rag.settings)
        app.dependency_overrides[get_rag] = lambda: rag
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rag", timeout=120)

    @property
    def llm_calls(self) -> int:
        return len(self.fake.state.requests)

    async def ask(self, question: str = QUESTION, **body: Any) -> dict[str, Any]:
        response = await self.client.post("/v1/ask", json={"question": question, **body})
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result


@pytest.fixture
async def rig(
    settings: Settings, triton_server: Settings, fake_llm: FakeOpenAIServer, fresh_db: str
) -> AsyncIterator[Rig]:
    fake_llm.reset()
    fake_llm.state.default = Reply(text="It lives under /tmp and /var/tmp [1].")
    async with RagApp(cached_settings(settings, fake_llm, fresh_db)) as rag:
        await rag.add_documents([doc("scratch", SCRATCH), doc("queue", QUEUE)], collection="alpha")
        await rag.add_documents([doc("coffee", COFFEE)], collection="beta")
        rig = Rig(rag, fake_llm)
        async with rig.client:
            yield rig


def counted(outcome: str) -> float:
    value: float = CACHE_TOTAL.labels(outcome)._value.get()
    return value


async def test_a_repeated_question_is_answered_from_the_cache_on_every_interface(rig: Rig) -> None:
    hits = counted("hit")
    first = await rig.ask()
    assert first["cached"] is False and rig.llm_calls == 1 and first["citations"]
    again = await rig.ask("  Where does the scratch space for  temporary files live on the cluster nodes ?! ")
    assert again["cached"] is True and rig.llm_calls == 1
    assert (again["answer"], again["citations"]) == (first["answer"], first["citations"])
    assert set(again["timings_ms"]) == {"cache", "total"}

    stream = await rig.client.post("/v1/ask/stream", json={"question": QUESTION})
    events = sse_events(stream.text)
    assert [name for name, _ in events] == ["text", "result"] and events[0][1]["text"] == first["answer"]
    assert events[1][1]["cached"] is True and events[1][1]["citations"] == first["citations"]

    chat = await rig.client.post(
        "/v1/chat/completions", json={"model": "triton-rag", "messages": [{"role": "user", "content": QUESTION}]}
    )
    completion = chat.json()
    assert chat.status_code == 200 and completion["cached"] is True, completion
    assert completion["choices"][0]["message"]["content"] == first["answer"]
    assert completion["citations"] == first["citations"] and completion["usage"]["total_tokens"] == 0
    streamed = await rig.client.post(
        "/v1/chat/completions",
        json={"model": "triton-rag", "stream": True, "messages": [{"role": "user", "content": QUESTION}]},
    )
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert [c["cached"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] == [True]
    assert rig.llm_calls == 1 and counted("hit") == hits + 4

    settings = rig.rag.settings
    env = cli_env(settings) | {
        "ANSWER_CACHE": "true",
        "DATABASE_URL": str(settings.database_url),
        "LLM_MODEL": "fake",
        "REFUSAL_MIN_SCORE": "0.3",
    }
    argv = [sys.executable, "-m", "agent", "ask", "--json", QUESTION]
    cli = await asyncio.to_thread(subprocess.run, argv, env=env, capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr
    printed = json.loads(cli.stdout)
    assert printed["cached"] is True and printed["citations"] == first["citations"] and rig.llm_calls == 1


async def test_an_ingest_replace_or_delete_in_the_scope_is_answered_afresh(rig: Rig) -> None:
    alpha = {"collection": "alpha"}
    assert (await rig.ask(**alpha))["cached"] is False
    assert (await rig.ask(**alpha))["cached"] is True and rig.llm_calls == 1

    await rig.rag.add_documents([doc("coffee-2", COFFEE + " Twice.")], collection="beta")  # outside the scope
    assert (await rig.ask(**alpha))["cached"] is True and rig.llm_calls == 1

    await rig.rag.add_documents([doc("printers", "The printers are on the second floor.")], collection="alpha")
    assert (await rig.ask(**alpha))["cached"] is False and rig.llm_calls == 2
    assert (await rig.ask(**alpha))["cached"] is True

    revised = SCRATCH.replace("/var/tmp", "/scratch/local")
    await rig.rag.add_documents([doc("scratch", revised)], collection="alpha")  # the cited document, replaced
    rig.fake.state.default = Reply(text="It lives under /tmp and /scratch/local [1].")
    replaced = await rig.ask(**alpha)
    assert replaced["cached"] is False and rig.llm_calls == 3 and "/scratch/local" in replaced["answer"]

    await rig.rag.delete_documents(["scratch"], collections=["alpha"])  # the cited document, deleted
    after = await rig.ask(**alpha)
    assert after["cached"] is False and rig.llm_calls in (3, 4)  # refused without the LLM, or answered by it
    assert all(c["doc_id"] != "scratch" for c in after["citations"])

    unscoped = await rig.ask()  # every collection: any write anywhere moves its version
    assert unscoped["cached"] is False
    await rig.rag.add_documents([doc("coffee-3", COFFEE + " Thrice.")], collection="beta")
    assert (await rig.ask())["cached"] is False


async def test_another_scope_filter_or_top_k_misses(rig: Rig) -> None:
    assert (await rig.ask())["cached"] is False
    for body in ({"collection": "alpha"}, {"top_k": 2}, {"filter": {"source": "scratch.txt"}}):
        assert (await rig.ask(**body))["cached"] is False, body
    assert rig.llm_calls == 4
    assert (await rig.ask(top_k=2))["cached"] is True and rig.llm_calls == 4


async def test_conversation_turns_bypass_the_cache(rig: Rig) -> None:
    assert (await rig.ask())["cached"] is False
    conversation = (await rig.client.post("/v1/conversations", json={})).json()["id"]
    first_turn = await rig.ask(conversation_id=conversation)  # no history yet: a first-turn question
    assert first_turn["cached"] is True and rig.llm_calls == 1
    second_turn = await rig.ask(conversation_id=conversation)  # the same words after a turn: history, no cache
    assert second_turn["cached"] is False and rig.llm_calls == 2
    chat = await rig.client.post(
        "/v1/chat/completions",
        json={
            "model": "triton-rag",
            "messages": [
                {"role": "user", "content": "What is scratch space?"},
                {"role": "assistant", "content": "Temporary storage."},
                {"role": "user", "content": QUESTION},
            ],
        },
    )
    assert chat.json()["cached"] is False and rig.llm_calls == 3


async def test_an_expired_entry_is_answered_afresh(rig: Rig) -> None:
    assert (await rig.ask())["cached"] is False
    entries = rig.rag.services.answer_cache
    assert isinstance(entries, PostgresAnswerCache)
    async with entries.vectors.pool.acquire() as conn:
        await conn.execute("UPDATE answer_cache SET created_at = now() - interval '2 hours'")
    assert (await rig.ask())["cached"] is False and rig.llm_calls == 2


async def test_with_the_cache_off_nothing_is_ever_cached(
    settings: Settings, triton_server: Settings, fake_llm: FakeOpenAIServer, fresh_db: str
) -> None:
    fake_llm.reset()
    async with RagApp(cached_settings(settings, fake_llm, fresh_db, answer_cache=False)) as rag:
        assert rag.answer_cache is None
        await rag.add_documents([doc("scratch", SCRATCH)], collection="alpha")
        answers = [await rag.ask(QUESTION) for _ in range(3)]
    assert [a.cached for a in answers] == [False] * 3 and len(fake_llm.state.requests) == 3


async def test_degraded_answers_are_not_cached(rig: Rig) -> None:
    """An answer with no citations (the model claiming the documents do not cover what they do), a refusal, and an
    answer of a run whose tool call failed are asked afresh every time, once the LLM recovers too; a question whose
    case or inner punctuation differs (C and C#) is another question."""
    rig.fake.state.default = Reply(text="The documents do not say where scratch space lives.")
    for _ in range(2):
        assert (await rig.ask())["cached"] is False
    assert rig.llm_calls == 2
    rig.fake.state.default = Reply(text="It lives under /tmp and /var/tmp [1].")
    recovered = await rig.ask()
    assert recovered["cached"] is False and recovered["citations"] and rig.llm_calls == 3
    assert (await rig.ask())["cached"] is True

    assert (await rig.ask("What is C?"))["refused"] is True
    assert (await rig.ask("What is C?"))["cached"] is False

    rig.fake.reset(
        Reply(text="ok"),  # the tool-calling probe before the first agentic answer
        Reply(tool_call=("search_documents", {"query": " "})),  # refused by the tool: retried
        Reply(tool_call=("search_documents", {"query": "scratch space temporary files"})),
        Reply(text="It lives under /tmp [1]."),
    )
    question = "Where do the cluster nodes keep scratch space for temporary files?"
    first = await rig.ask(question, policy="agentic")
    assert first["citations"] and first["cached"] is False
    rig.fake.reset(
        Reply(tool_call=("search_documents", {"query": "scratch space temporary files"})),
        Reply(text="It lives under /tmp [1]."),
    )
    again = await rig.ask(question, policy="agentic")
    assert again["cached"] is False and len(rig.fake.state.requests) == 2  # asked afresh, then stored
    assert (await rig.ask(question, policy="agentic"))["cached"] is True
