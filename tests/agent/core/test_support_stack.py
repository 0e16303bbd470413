"""The support check on the real stack: the shipped verifier on the session's Triton, the real embedder and the
retriever over the ingested SciFact subset (tests/conftest.py). What only the real parts show: a rationale sentence
of a gold abstract is SUPPORT with its evidence and its citation, an answer the passages do not say becomes quotes of
them in strict mode, and a fixed gate on SciFact test pairs fails when the verifier's SUPPORT precision drops. The
check's logic is tested without servers in test_support.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import numpy as np
import pytest

from agent.config.settings import Settings
from agent.core.support import SupportChecker
from agent.core.wiring import build_retriever, build_support_checker, build_verifier
from evals.scifact import SCIFACT_DIR
from tools.embedder import TritonEmbedder
from tools.embedder.verifier import TritonVerifier, get_verifier_spec
from tools.retrieval import Retriever
from tools.store import VectorStore
from tools.support import DecisionRule

ADAR1 = "ADAR1 binds to Dicer to cleave pre-miRNA."  # SciFact test claim 49: SUPPORT, doc 5953485 sentences 1, 2

GATE_MIN_SUPPORT_PRECISION = 0.75
"""Least SUPPORT precision of the shipped verifier on the gate's 95 pairs (0.80 when it shipped, 2026-12-05: a drop of
more than 2 false SUPPORTs of ~35 fails)."""
GATE_MIN_SUPPORT_RECALL = 0.5
"""Least SUPPORT recall on the gate's pairs (0.596 when it shipped; a verifier that says NOT_ENOUGH_INFO to everything
is no verifier)."""


@pytest.fixture(scope="module")
async def verifier(triton_server: Settings) -> AsyncIterator[TritonVerifier]:
    async with build_verifier(triton_server) as client:
        yield client


@pytest.fixture
def retriever(embedder: TritonEmbedder, store: VectorStore, settings: Settings) -> Retriever:
    return build_retriever(embedder, store, settings)


@pytest.fixture
def checker(settings: Settings, embedder: TritonEmbedder, verifier: TritonVerifier) -> SupportChecker:
    return build_support_checker(settings, embedder, verifier)


async def test_a_rationale_sentence_is_supported_by_its_abstract_and_cited_there(
    retriever: Retriever, checker: SupportChecker
) -> None:
    found = await retriever.search(ADAR1, 5)
    gold = next(p for p in found.passages if p.doc_id == "5953485")
    wrong = next(p.number for p in found.passages if p.doc_id != "5953485")
    checked = await checker.check(ADAR1, f"{ADAR1[:-1]} [{wrong}].", found.passages, "flag")
    (sentence,) = checked.report.sentences
    assert sentence.label == "SUPPORT", sentence
    assert sentence.evidence is not None and sentence.evidence.doc_id == "5953485"
    assert sentence.cited == [gold.number] and sentence.repointed
    start, end = sentence.evidence.passage_span
    assert gold.text[start:end] == sentence.evidence.text
    assert checked.text == f"{ADAR1[:-1]} [{gold.number}]."


async def test_an_answer_the_passages_do_not_say_becomes_quotes_in_strict_mode(
    retriever: Retriever, checker: SupportChecker
) -> None:
    found = await retriever.search(ADAR1, 5)
    answer = "The Eiffel Tower was finished in 1889 for the World's Fair in Paris [1]."
    checked = await checker.check(ADAR1, answer, found.passages, "strict")
    assert checked.report.supported == 0 and checked.report.extractive
    assert checked.report.generated == answer and "Eiffel" not in checked.text
    quotes = checked.report.sentences
    assert quotes and all(s.quote and s.evidence is not None for s in quotes)
    for s in quotes:
        assert s.evidence is not None and checked.text[s.span[0] : s.span[1]] == s.text
        assert s.evidence.text in next(p.text for p in found.passages if p.number == s.evidence.passage)


def gate_pairs() -> list[tuple[str, str, bool]]:
    """(claim, sentence, is a SUPPORT rationale) for the first 20 SciFact test claims with SUPPORT evidence: each
    rationale sentence, and the abstract's first two sentences that are in no rationale."""
    corpus = {}
    for line in (SCIFACT_DIR / "corpus.jsonl").open():
        doc = json.loads(line)
        corpus[doc["_id"]] = doc["text"]
    spans = {}
    for line in (SCIFACT_DIR / "sentences.jsonl").open():
        doc = json.loads(line)
        spans[doc["_id"]] = doc["sentences"]
    test_ids = {line.split("\t")[0] for line in (SCIFACT_DIR / "qrels" / "test.tsv").open().readlines()[1:]}
    pairs: list[tuple[str, str, bool]] = []
    claims = 0
    for line in (SCIFACT_DIR / "queries.jsonl").open():
        query = json.loads(line)
        if query["_id"] not in test_ids or claims == 20:
            continue
        evidence = {
            doc: [e for e in sets if e["label"] == "SUPPORT"] for doc, sets in (query["metadata"] or {}).items()
        }
        evidence = {doc: sets for doc, sets in evidence.items() if sets}
        if not evidence:
            continue
        claims += 1
        for doc, sets in evidence.items():
            rationale = {i for s in sets for i in s["sentences"]}
            text = corpus[doc]
            pairs += [(query["text"], text[a:b], True) for i, (a, b) in enumerate(spans[doc]) if i in rationale]
            others = [i for i in range(len(spans[doc])) if i not in rationale][:2]
            pairs += [(query["text"], text[spans[doc][i][0] : spans[doc][i][1]], False) for i in others]
    return pairs


async def test_the_shipped_verifiers_support_precision_holds_on_a_fixed_gate(
    verifier: TritonVerifier, settings: Settings
) -> None:
    pairs = gate_pairs()
    spec = get_verifier_spec(settings.support_model)
    rule = DecisionRule(spec.support_threshold, spec.contradict_threshold)
    probs = await verifier.classify([(claim, sentence) for claim, sentence, _ in pairs])
    assert probs.shape == (len(pairs), 3) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-4)
    said = np.array([rule.label(row) == "SUPPORT" for row in probs])
    gold = np.array([is_rationale for _, _, is_rationale in pairs])
    precision = (said & gold).sum() / max(1, said.sum())
    recall = (said & gold).sum() / gold.sum()
    assert precision >= GATE_MIN_SUPPORT_PRECISION, (precision, recall)
    assert recall >= GATE_MIN_SUPPORT_RECALL, (precision, recall)
