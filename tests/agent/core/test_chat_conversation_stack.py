"""`rag chat` keeps its conversation in the real Postgres: the CLI in a subprocess on the real store and Triton, with
the scripted OpenAI-compatible server as the LLM (the conversation's plumbing, not the model's answers, is under
test). The follow-up is searched with the condensed query, the LLM gets the earlier turn, the id resumes it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from uuid import UUID, uuid4

import pytest

from agent.config.settings import Settings
from tests.conftest import cli_env
from tests.fake_openai import FakeOpenAIServer
from tools.model_specs import get_spec
from tools.store import VectorStore
from tools.store.conversations import ConversationStore

pytestmark = pytest.mark.stack

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."
FOLLOW_UP = "and what about its side effects?"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def chat(settings: Settings, fake: FakeOpenAIServer, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    llm = {"LLM_BASE_URL": fake.base_url, "VLLM_PORT": str(fake.port), "LLM_MODEL": "fake", "LLM_MAX_RETRIES": "0"}
    env = cli_env(settings) | llm
    return subprocess.run(
        [sys.executable, "-m", "agent", "chat", "--top-k", "3", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )


def user_messages(request: dict[str, object]) -> list[str]:
    messages = request["messages"]
    assert isinstance(messages, list)
    return [str(m["content"]) for m in messages if m["role"] == "user"]


async def test_chat_conversation_is_stored_followed_and_resumed(
    ingested: str, settings: Settings, fake: FakeOpenAIServer
) -> None:
    requests = fake.reset()
    first = chat(settings, fake, f"{CLAIM}\n{FOLLOW_UP}\n\n")
    assert first.returncode == 0, first.stderr
    found = re.search(r"conversation ([0-9a-f-]{36}) \(resume it with: rag chat --conversation \1\)", first.stdout)
    assert found, first.stdout
    cid = UUID(found.group(1))
    searches = [line for line in first.stdout.splitlines() if "search_documents(query=" in line]
    assert len(searches) == 2 and f"{FOLLOW_UP}\\n{CLAIM}" in searches[1]  # the condensed follow-up query
    assert len(requests) == 2 and CLAIM in user_messages(requests[1])[0]  # turn 1 went with the follow-up

    requests = fake.reset()
    resumed = chat(settings, fake, "and its causes?\n\n", "--conversation", str(cid))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming conversation {cid}" in resumed.stdout and "(2 turns)" in resumed.stdout
    assert "(resume it with" not in resumed.stdout  # no new conversation
    assert requests and CLAIM in user_messages(requests[0])[0]

    spec = get_spec(settings.embedder_model)
    async with VectorStore(ingested, spec.name, spec.dim) as store:
        stored = await ConversationStore(store).get(cid)
    assert stored is not None and [t.question for t in stored.turns] == [CLAIM, FOLLOW_UP, "and its causes?"]
    assert stored.title == CLAIM and stored.turns[0].answer.startswith("The passages say so")

    unknown = chat(settings, fake, "q\n\n", "--conversation", str(uuid4()))
    assert unknown.returncode == 1 and "does not exist" in unknown.stderr and "Traceback" not in unknown.stderr
