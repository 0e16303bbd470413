"""SciFact's sentence- and abstract-level metrics (`evals.support_metrics`) on hand-made cases, checked against the
official scorer's rules (github.com/allenai/scifact `verisci/evaluate/lib/metrics.py`), and the rule that turns the
verifier's sentence probabilities into a prediction."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from evals.support_metrics import (
    MAX_ABSTRACT_SENTS,
    DocPrediction,
    GoldDoc,
    abstract_counts,
    label_scores,
    predict_abstract,
    predict_by_similarity,
    prf,
    sentence_counts,
    tune_thresholds,
)
from tools.embedder.verifier import LOCAL_VERIFIER, get_verifier_spec

SPEC = replace(get_verifier_spec(LOCAL_VERIFIER), support_threshold=0.5, contradict_threshold=0.5)
GOLD = {"d1": GoldDoc("SUPPORT", (frozenset({1, 2}), frozenset({5})))}


def test_a_rationale_counts_only_when_all_its_sentences_are_predicted() -> None:
    # Worked through the official count_rationale_sents: 1 lies in {1, 2} but 2 is missing -> no credit; 5 completes
    # {5} -> credit; 7 is in no rationale. relevant = 2 + 1 gold sentences.
    counts = sentence_counts([({"d1": DocPrediction("SUPPORT", (1, 5, 7))}, GOLD)])
    assert counts == {"relevant": 3, "retrieved": 3, "correct_selection": 1, "correct_label": 1}
    whole = sentence_counts([({"d1": DocPrediction("SUPPORT", (1, 2))}, GOLD)])
    assert whole["correct_selection"] == 2


def test_a_wrong_label_keeps_selection_credit_but_not_label_credit() -> None:
    counts = sentence_counts([({"d1": DocPrediction("CONTRADICT", (1, 2, 5))}, GOLD)])
    assert (counts["correct_selection"], counts["correct_label"]) == (3, 0)
    assert prf(counts, "correct_selection") == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert prf(counts, "correct_label") == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_nei_predictions_and_uncited_abstracts() -> None:
    # NEI predictions retrieve nothing; sentences of an abstract without gold evidence are retrieved and wrong.
    counts = sentence_counts(
        [({"d1": DocPrediction("NOT_ENOUGH_INFO", ()), "d9": DocPrediction("SUPPORT", (0, 1))}, GOLD)]
    )
    assert counts == {"relevant": 3, "retrieved": 2}


def test_abstract_level_reads_only_the_first_three_predicted_sentences() -> None:
    gold = {"d1": GoldDoc("SUPPORT", (frozenset({3}),))}
    late = abstract_counts([({"d1": DocPrediction("SUPPORT", (0, 1, 2, 3))}, gold)])
    assert (late["correct_label_only"], late.get("correct_rationalized", 0)) == (1, 0)
    early = abstract_counts([({"d1": DocPrediction("SUPPORT", (3, 0))}, gold)])
    assert early["correct_rationalized"] == 1


def test_prediction_keeps_at_most_three_sentences_the_likeliest() -> None:
    probs = np.array(
        [[0.9, 0.05, 0.05], [0.6, 0.1, 0.3], [0.1, 0.1, 0.8], [0.8, 0.1, 0.1], [0.7, 0.2, 0.1], [0.2, 0.7, 0.1]],
        dtype=np.float32,
    )
    pred = predict_abstract(probs, SPEC)
    assert len(pred.rationale) == MAX_ABSTRACT_SENTS and pred.rationale == (0, 3, 4)
    assert pred.label == "SUPPORT"
    assert predict_abstract(probs[[2]], SPEC) == DocPrediction("NOT_ENOUGH_INFO", ())
    contra = predict_abstract(np.array([[0.1, 0.8, 0.1], [0.55, 0.0, 0.45]], dtype=np.float32), SPEC)
    assert contra == DocPrediction("CONTRADICT", (0, 1))


def test_baseline_selects_similar_sentences_as_support_only() -> None:
    sims = np.array([0.2, 0.9, 0.5, 0.7, 0.65], dtype=np.float32)
    assert predict_by_similarity(sims, 0.6) == DocPrediction("SUPPORT", (1, 3, 4))
    assert predict_by_similarity(sims, 0.95) == DocPrediction("NOT_ENOUGH_INFO", ())


def test_tuned_thresholds_maximise_selection_and_label_f1() -> None:
    # sentence 0 is the SUPPORT rationale with P(SUPPORT) 0.72; sentence 1 is a distractor with P(SUPPORT) 0.4:
    # any support threshold in (0.4, 0.72] gives F1 1; ties go to the highest.
    probs = [{"d1": np.array([[0.72, 0.1, 0.18], [0.4, 0.1, 0.5]], dtype=np.float32)}]
    gold = [{"d1": GoldDoc("SUPPORT", (frozenset({0}),))}]
    support, contradict, f1 = tune_thresholds(probs, gold, SPEC)
    assert (support, f1) == (0.7, 1.0) and contradict == pytest.approx(0.95)


def test_label_scores_accuracy_and_per_class() -> None:
    scores = label_scores(["SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO", "SUPPORT"], ["SUPPORT"] * 3 + ["CONTRADICT"])
    assert scores["accuracy"] == 0.25
    per = scores["per_class"]
    assert isinstance(per, dict) and per["SUPPORT"]["precision"] == pytest.approx(1 / 3, abs=1e-4)
    assert per["CONTRADICT"]["f1"] == 0.0
