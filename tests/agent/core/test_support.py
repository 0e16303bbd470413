"""The support check without servers: the answer path with pydantic-ai's FunctionModel, the in-memory collection and
the support doubles (`tools.in_memory_support`). Labels, re-pointed and added markers, repeats collapsed, strict
removal, the extractive answer, the streamed text equal to the checked answer, and the `support` event. The real
verifier on Triton: tests/tools/embedder/test_verifier_stack.py; the check over the real stack:
test_support_stack.py."""

from __future__ import annotations

import pytest
from pydantic_ai.models.function import FunctionModel

from agent.core.answer import AnswerRequest, answer
from agent.core.events import AgentEvent, AnswerRestart, SupportChecked, TextDelta
from agent.core.rag_agent import RagDeps, build_agent
from agent.core.results import AskResult, SupportMode
from agent.core.support import EXTRACTIVE_INTRO, SupportChecker, answer_sentences, removed_note, repeat_key
from tests.agent_corpus import COVERED, DOCUMENTS
from tests.scripted_model import ScriptedModel
from tools.in_memory import InMemoryCollection
from tools.in_memory_support import HashedEmbedder, LexicalVerifier
from tools.retrieval_config import RetrievalConfig
from tools.support import CheckOptions, DecisionRule, EmbeddingSimilarity

B12 = "Vitamin B12 deficiency raises plasma homocysteine in older adults"
FOLATE = "Folate intake lowers homocysteine levels in adults"


async def ask(text: str, mode: SupportMode = "flag", events: list[AgentEvent] | None = None) -> AskResult:
    model = ScriptedModel()
    model.text = text
    agent = build_agent(FunctionModel(stream_function=model.stream), {"max_tokens": 64}, "always")
    rule = DecisionRule(0.6, 0.6)
    checker = SupportChecker(EmbeddingSimilarity(HashedEmbedder()), LexicalVerifier(), CheckOptions(rule=rule))
    deps = RagDeps(InMemoryCollection(DOCUMENTS, RetrievalConfig(mode="hybrid")), 3, 0.3, support=checker)
    on_event = None if events is None else events.append
    return await answer(agent, deps, AnswerRequest(COVERED, support=mode, on_event=on_event))


def passage_of(result: AskResult, doc_id: str) -> int:
    return next(c.passage for c in result.citations if c.doc_id == doc_id)


async def test_a_supported_sentence_cites_the_passage_that_supports_it_and_is_labelled() -> None:
    result = await ask(f"{B12} [2].")  # the model cites the wrong passage
    assert result.support is not None
    (sentence,) = result.support.sentences
    assert sentence.label == "SUPPORT" and sentence.supported
    assert sentence.evidence is not None and sentence.evidence.doc_id == "b12"
    number = sentence.evidence.passage
    assert sentence.cited == [number] and sentence.written == [2] and sentence.repointed == (number != 2)
    assert result.answer == f"{B12} [{number}]."
    assert [c.passage for c in result.citations] == [number]
    start, end = sentence.evidence.passage_span
    assert sentence.evidence.text == result.citations[0].text[start:end]


async def test_a_sentence_without_markers_gets_the_marker_of_its_support() -> None:
    result = await ask(f"{FOLATE}.")
    assert result.support is not None and result.support.supported == 1
    number = result.support.sentences[0].cited[0]
    assert result.answer == f"{FOLATE} [{number}]."
    assert result.citations[0].doc_id == "folate"


async def test_repeated_sentences_are_collapsed_into_one() -> None:
    text = f"1. {B12} [1].\n2. {B12} [1].\n3. {B12} [1].\n4. {FOLATE}."
    result = await ask(text)
    assert result.support is not None
    assert result.support.repeated == 2
    assert [s.label for s in result.support.sentences] == ["SUPPORT", "SUPPORT"]
    assert result.answer.count("Vitamin B12") == 1
    # the list is numbered again after the collapse: 1, 2, not 1, 4
    assert [line.split(" ", 1)[0] for line in result.answer.splitlines()] == ["1.", "2."]


async def test_flag_keeps_an_unsupported_sentence_marked_and_strict_removes_it_and_says_so() -> None:
    text = f"{B12} [1]. The moon is made of green cheese [1]."
    flagged = await ask(text, "flag")
    assert flagged.support is not None
    assert [s.label for s in flagged.support.sentences] == ["SUPPORT", "NOT_ENOUGH_INFO"]
    assert flagged.support.unsupported == 1 and "green cheese" in flagged.answer
    strict = await ask(text, "strict")
    assert strict.support is not None and strict.support.removed == 1
    assert "green cheese" not in strict.answer
    assert strict.answer.endswith(removed_note(1))
    assert [s.label for s in strict.support.sentences] == ["SUPPORT"]


async def test_a_contradicted_sentence_is_labelled_contradict_with_its_evidence() -> None:
    result = await ask(f"{B12} [1]. Folate intake does not lower homocysteine levels in adults.")
    assert result.support is not None
    labels = [s.label for s in result.support.sentences]
    assert labels == ["SUPPORT", "CONTRADICT"]
    evidence = result.support.sentences[1].evidence
    assert evidence is not None and evidence.doc_id == "folate"


async def test_an_answer_with_no_supported_sentence_becomes_quotes_of_the_evidence() -> None:
    result = await ask("The moon is made of green cheese. Cats sleep all day.")
    assert result.support is not None and result.support.extractive
    assert result.answer.startswith(EXTRACTIVE_INTRO)
    assert result.support.generated == "The moon is made of green cheese. Cats sleep all day."
    quotes = result.support.sentences
    assert quotes and all(s.quote and s.supported for s in quotes)
    for s in quotes:
        assert s.evidence is not None
        assert result.answer[s.span[0] : s.span[1]] == s.text
        assert f"“{s.evidence.text}” [{s.evidence.passage}]" == s.text
    assert {c.passage for c in result.citations} == {s.evidence.passage for s in quotes if s.evidence}


async def test_a_question_in_the_answer_is_no_claim_and_never_supported() -> None:
    result = await ask(f"{B12} [1]. Does {FOLATE.lower()}?")
    assert result.support is not None
    assert [s.label for s in result.support.sentences] == ["SUPPORT", "NOT_ENOUGH_INFO"]
    assert result.support.sentences[1].evidence is None


async def test_off_leaves_the_answer_as_the_model_wrote_it() -> None:
    result = await ask(f"{B12} [2]. {B12} [2].", "off")
    assert result.support is None
    assert result.answer == f"{B12} [2]. {B12} [2]."


async def test_spans_point_at_each_sentence_and_the_stream_ends_with_the_checked_answer() -> None:
    events: list[AgentEvent] = []
    result = await ask(f"{B12} [2]. {B12} [2]. {FOLATE}.", events=events)
    assert result.support is not None
    for s in result.support.sentences:
        assert result.answer[s.span[0] : s.span[1]] == s.text
    shown = ""
    for event in events:
        if isinstance(event, AnswerRestart):
            shown = ""
        elif isinstance(event, TextDelta):
            shown += event.text
    assert shown == result.answer
    (checked,) = [e for e in events if isinstance(e, SupportChecked)]
    assert checked.support == result.support
    assert isinstance(events[-1], SupportChecked)
    assert "support" in result.timings_ms


def test_answer_sentences_read_markers_claims_and_list_numbers() -> None:
    text = "1. Folate lowers it [1, 3].\n2. B12 raises it. [2]"
    first, second = answer_sentences(text)
    assert (first.cited, first.claim) == ((1, 3), "Folate lowers it.")
    assert (second.cited, second.claim, second.gap) == ((2,), "B12 raises it.", "\n")
    assert text[first.start : first.end] == first.text


def test_repeat_key_ignores_case_spacing_and_punctuation() -> None:
    assert repeat_key("B12 raises  homocysteine.") == repeat_key("b12 raises homocysteine!")
    assert repeat_key("B12 raises homocysteine") != repeat_key("B12 lowers homocysteine")


def test_the_decision_rule_needs_its_threshold_and_the_larger_probability() -> None:
    import numpy as np

    rule = DecisionRule(0.5, 0.4)
    assert rule.label(np.array([0.6, 0.3, 0.1], dtype=np.float32)) == "SUPPORT"
    assert rule.label(np.array([0.45, 0.45, 0.1], dtype=np.float32)) == "CONTRADICT"
    assert rule.label(np.array([0.3, 0.3, 0.4], dtype=np.float32)) == "NOT_ENOUGH_INFO"
    low = DecisionRule(0.3, 0.3)  # both reach their thresholds: the likelier wins
    assert low.label(np.array([0.4, 0.5, 0.1], dtype=np.float32)) == "CONTRADICT"
    assert low.label(np.array([0.5, 0.4, 0.1], dtype=np.float32)) == "SUPPORT"
    with pytest.raises(ValueError, match="support_threshold"):
        DecisionRule(1.5, 0.5)
