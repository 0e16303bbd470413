"""The follow-up set built from SciFact claims by rule (`evals.followup_set`): the subject before the first listed
verb becomes the first turn's topic and a pronoun in the second turn; the same claims always give the same set."""

from __future__ import annotations

import pytest

from evals.followup_set import FollowUpPair, corpus_sample, follow_up_pair, follow_up_pairs
from evals.scifact import Query, load_queries


def pair(text: str) -> FollowUpPair | None:
    return follow_up_pair(Query("7", text))


def test_the_subject_becomes_a_pronoun_that_agrees_with_the_verb() -> None:
    singular = pair("ALDH1 expression is associated with poorer prognosis in breast cancer.")
    assert singular == FollowUpPair(
        "7",
        "What is known about ALDH1 expression?",
        "It is associated with poorer prognosis in breast cancer.",
        "ALDH1 expression is associated with poorer prognosis in breast cancer.",
        "ALDH1 expression",
        "it",
    )
    plural = pair("0-dimensional biomaterials show inductive properties.")
    assert plural is not None and plural.second == "They show inductive properties." and plural.pronoun == "they"
    modal = pair("Anthrax spores can be disposed of easily after they are dispersed.")
    assert modal is not None and modal.second.startswith("This can be disposed") and modal.subject == "Anthrax spores"
    assert modal.first == "What is known about anthrax spores?"  # an ordinary capitalised word is lowered
    article = pair("A deficiency of vitamin B12 increases blood levels of homocysteine.")
    assert article is not None and article.first == "What is known about a deficiency of vitamin B12?"
    assert article.second == "It increases blood levels of homocysteine."


@pytest.mark.parametrize(
    "claim",
    [
        "Is vitamin D good for bones?",  # a question: the capitalised verb starts no rest
        "Birth weight at term among twins in the first year of life in rural areas increases risk.",  # too long
        "They are associated with nothing.",  # already a pronoun
        "Nothing listed here.",  # no listed verb
        "Smoking, in the end, is bad.",  # a subject cut at a comma
        "Obesity increases",  # no rest after the verb
    ],
)
def test_claims_the_rule_does_not_fit_are_skipped(claim: str) -> None:
    assert pair(claim) is None


def test_the_scifact_test_set_is_reproducible() -> None:
    queries = load_queries("test")
    pairs = follow_up_pairs(queries)
    assert pairs == follow_up_pairs(queries) and len(pairs) == 231
    assert follow_up_pairs(queries, limit=150) == pairs[:150]
    assert all(" ".join(p.claim.split()) == f"{p.subject} {p.second.split(' ', 1)[1]}" for p in pairs)
    with pytest.raises(ValueError, match="limit=0"):
        follow_up_pairs(queries, limit=0)


def test_corpus_sample_keeps_every_gold_document_and_a_fixed_rest() -> None:
    docs = [f"d{i}" for i in range(20)]
    sample = corpus_sample(docs, ["d7", "d3", "missing"], 5)
    assert sample[:2] == ["d7", "d3"] and len(sample) == 5
    assert sample == corpus_sample(list(reversed(docs)), ["d7", "d3"], 5)  # the file order does not matter
    assert corpus_sample(docs, ["d1", "d2"], 1) == ["d1", "d2"]  # gold documents are never cut
    assert sorted(corpus_sample(docs, [], None)) == sorted(docs)
    with pytest.raises(ValueError, match="size=0"):
        corpus_sample(docs, [], 0)
