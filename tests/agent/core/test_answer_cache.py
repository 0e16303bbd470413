"""The answer cache's key: what makes two questions the same, and everything that keeps two answers apart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, UserPromptPart

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.answer_cache import (
    ANSWER_SETTINGS,
    BYPASS,
    CACHE_TOTAL,
    PROMPT_VERSION,
    AnswerCache,
    normalise_question,
    request_digest,
)
from agent.core.results import AskResult, Citation, SupportReport
from tools.access import UNRESTRICTED, Access, caller_access
from tools.records import CacheLookup
from tools.scope import SearchScope

SETTINGS = Settings.model_validate({"refusal_min_score": 0.3, "answer_cache": True})
QUESTION = "Does vitamin D affect bone density?"


def digest(request: AnswerRequest, settings: Settings = SETTINGS) -> str:
    return request_digest(request, settings)


@pytest.mark.parametrize(
    "variant",
    [
        "Does vitamin D affect bone density",
        "  Does   vitamin D\taffect bone density ?! ",
        "Does vitamin D affect bone density...",
        "Does vitamin D affect bone density?\n",
    ],
)
def test_whitespace_and_a_trailing_question_mark_do_not_change_the_key(variant: str) -> None:
    assert normalise_question(variant) == "Does vitamin D affect bone density"
    assert digest(AnswerRequest(variant)) == digest(AnswerRequest(QUESTION))


def test_inner_punctuation_and_words_change_the_key() -> None:
    assert digest(AnswerRequest("Does vitamin D, affect bone density?")) != digest(AnswerRequest(QUESTION))
    assert digest(AnswerRequest("Does vitamin C affect bone density?")) != digest(AnswerRequest(QUESTION))


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("What is C?", "What is C#?"),
        ("Is F better than F#?", "Is F better than F?"),
        ("Is 5 enough?", "Is 5% enough?"),
        ("What does WHO say about masks?", "What does who say about masks?"),
        ("What is C++?", "What is C?"),
    ],
)
def test_case_and_punctuation_that_change_meaning_change_the_key(one: str, other: str) -> None:
    assert digest(AnswerRequest(one)) != digest(AnswerRequest(other))


def test_a_question_of_punctuation_only_keeps_it() -> None:
    assert normalise_question(" ?! ") == "?!"


@pytest.mark.parametrize(
    "other",
    [
        AnswerRequest(QUESTION, top_k=3),
        AnswerRequest(QUESTION, policy="agentic"),
        AnswerRequest(QUESTION, scope=SearchScope(collections=("alpha",))),
        AnswerRequest(QUESTION, scope=SearchScope.from_filter({"team": "bio"})),
        AnswerRequest(QUESTION, retrieval_query="vitamin D bone"),
        AnswerRequest(QUESTION, model_settings={"temperature": 0.7}),
    ],
    ids=["top_k", "policy", "collection", "filter", "retrieval_query", "model_settings"],
)
def test_every_option_of_the_answer_changes_the_key(other: AnswerRequest) -> None:
    assert digest(other) != digest(AnswerRequest(QUESTION))


def test_the_defaults_are_resolved_before_hashing() -> None:
    top_k, policy = SETTINGS.top_k, SETTINGS.agent_policy
    assert digest(AnswerRequest(QUESTION, top_k=top_k, policy=policy)) == digest(AnswerRequest(QUESTION))


def test_scope_order_does_not_change_the_key() -> None:
    one = SearchScope.from_filter({"team": ["bio", "chem"], "source": "a.md"}, ["beta", "alpha"])
    two = SearchScope.from_filter({"source": "a.md", "team": ["chem", "bio"]}, ["alpha", "beta"])
    assert digest(AnswerRequest(QUESTION, scope=one)) == digest(AnswerRequest(QUESTION, scope=two))


def test_an_empty_scope_differs_from_everything() -> None:
    none = SearchScope(collections=())
    assert digest(AnswerRequest(QUESTION, scope=none)) != digest(AnswerRequest(QUESTION, scope=SearchScope()))
    assert digest(AnswerRequest(QUESTION, scope=SearchScope())) == digest(AnswerRequest(QUESTION))


def test_callers_who_may_read_different_documents_never_share_a_key() -> None:
    eng, ops = SearchScope().read_by(caller_access(["eng"])), SearchScope().read_by(caller_access(["ops"]))
    keys = {digest(AnswerRequest(QUESTION, scope=s)) for s in (eng, ops, SearchScope())}
    assert len(keys) == 3
    again = SearchScope().read_by(caller_access(["eng", "everyone"]))
    assert digest(AnswerRequest(QUESTION, scope=again)) == digest(AnswerRequest(QUESTION, scope=eng))


@pytest.mark.parametrize(
    "update",
    [{"llm_model": "other-model"}, {"retrieval_mode": "dense"}, {"refusal_min_score": 0.5}, {"llm_max_tokens": 64}],
)
def test_the_llm_model_and_the_answer_settings_change_the_key(update: dict[str, object]) -> None:
    other = SETTINGS.model_copy(update=update)
    assert digest(AnswerRequest(QUESTION), other) != digest(AnswerRequest(QUESTION))


def test_settings_that_do_not_change_answers_keep_the_key() -> None:
    other = SETTINGS.model_copy(update={"answer_max_in_progress": 3, "db_pool_max_size": 2, "answer_cache_ttl_s": 5})
    assert digest(AnswerRequest(QUESTION), other) == digest(AnswerRequest(QUESTION))


def test_answer_settings_name_settings_fields() -> None:
    assert set(ANSWER_SETTINGS) <= set(Settings.model_fields)


def test_prompt_version_is_a_hash_of_the_prompts() -> None:
    assert len(PROMPT_VERSION) == 16 and int(PROMPT_VERSION, 16) >= 0


class NeverAsked:
    """A cache store that fails the test when it is used."""

    async def lookup(
        self, digest: str, collections: Sequence[str] | None, *, access: Access = UNRESTRICTED
    ) -> CacheLookup:
        raise AssertionError("looked up")

    async def store(self, key: str, answer: dict[str, Any], *, access: Access = UNRESTRICTED) -> None:
        raise AssertionError("stored")


async def test_a_question_with_history_is_neither_looked_up_nor_stored() -> None:
    earlier = [ModelRequest(parts=[UserPromptPart("What is vitamin D?")])]
    cache = AnswerCache(NeverAsked(), SETTINGS)
    bypassed = CACHE_TOTAL.labels("bypass")._value.get()
    looked = await cache.lookup(AnswerRequest(QUESTION, history=earlier))
    assert looked == BYPASS and CACHE_TOTAL.labels("bypass")._value.get() == bypassed + 1
    assert await cache.lookup(AnswerRequest(QUESTION, earlier_questions=["What is vitamin D?"])) == BYPASS
    await cache.store(looked, AskResult(answer="Yes [1].", citations=[], timings_ms={"total": 1.0}))


class Stored:
    """A cache store that misses every look-up and records what is stored (and the accesses it was asked with)."""

    def __init__(self) -> None:
        self.stored: list[dict[str, Any]] = []
        self.accesses: list[Access] = []

    async def lookup(
        self, digest: str, collections: Sequence[str] | None, *, access: Access = UNRESTRICTED
    ) -> CacheLookup:
        self.accesses.append(access)
        return CacheLookup(key="k", answer=None, settled=True)

    async def store(self, key: str, answer: dict[str, Any], *, access: Access = UNRESTRICTED) -> None:
        self.stored.append(answer)
        self.accesses.append(access)


async def test_the_callers_access_reaches_the_entries_on_lookup_and_store() -> None:
    entries = Stored()
    cache = AnswerCache(entries, SETTINGS)
    eng = caller_access(["eng"])
    looked = await cache.lookup(AnswerRequest(QUESTION, scope=SearchScope().read_by(eng)))
    await cache.store(looked, CITED.model_copy(update={"support": SupportReport(mode="flag", supported=1)}))
    assert entries.accesses == [eng, eng] and len(entries.stored) == 1


CITED = AskResult(
    answer="Yes [1].",
    citations=[Citation(doc_id="d", chunk_id="d#0", score=0.9, passage=1, text="Vitamin D helps.")],
    timings_ms={"total": 1.0},
)


@pytest.mark.parametrize(
    "degraded",
    [
        {"refused": True, "citations": []},
        {"answer": "The documents do not cover vitamin D.", "citations": []},  # a refusal the model made up
        {"failed_tool_calls": 1},
        {"truncated": True},
        {"support": SupportReport(mode="flag", extractive=True)},
    ],
)
async def test_only_complete_cited_answers_are_stored(degraded: dict[str, Any]) -> None:
    entries = Stored()
    cache = AnswerCache(entries, SETTINGS)
    looked = await cache.lookup(AnswerRequest(QUESTION))
    await cache.store(looked, CITED.model_copy(update=degraded))
    assert entries.stored == []
    await cache.store(looked, CITED.model_copy(update={"support": SupportReport(mode="flag", supported=1)}))
    assert [a["answer"] for a in entries.stored] == ["Yes [1]."]


def test_the_cache_is_on_by_default_and_bounded() -> None:
    fields = Settings.model_fields
    assert fields["answer_cache"].default is True
    assert fields["answer_cache_ttl_s"].default == 3600.0 and fields["answer_cache_max_entries"].default == 10000
