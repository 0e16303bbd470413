"""SciFact's metrics for a support verifier, and the rule that turns its sentence scores into a SciFact prediction.

Metrics as the official scorer computes them (github.com/allenai/scifact, `verisci/evaluate/lib/metrics.py` and
`verisci/evaluate/label_accuracy_gold_inputs.py`; Wadden et al., "Fact or Fiction: Verifying Scientific Claims",
EMNLP 2020, section 5):

- sentence level (`sentence_counts`): every gold rationale sentence is relevant; every sentence predicted for an
  abstract whose predicted label is not NEI is retrieved; a predicted sentence is correctly *selected* when it lies
  in a gold rationale of that abstract and every sentence of that rationale is predicted too ("a rationale counts
  only when all its sentences are predicted"); it is correctly *selected and labelled* when, in addition, the
  abstract's predicted label equals the gold one. P = correct / retrieved, R = correct / relevant.
- abstract level (`abstract_counts`): a non-NEI prediction is correct (label only) when the abstract has gold
  evidence of that label; rationalised when, in addition, its first `MAX_ABSTRACT_SENTS` (3) predicted sentences
  contain a whole gold rationale.
- label accuracy given gold inputs: per (claim, cited abstract), the gold label is the claim's (NEI claims: NEI);
  accuracy = correct labels / all.

A prediction comes from per-sentence probabilities (`predict_abstract`): a sentence is selected when `label_of` (the
shipped decision rule, `tools.embedder.verifier`) gives it SUPPORT or CONTRADICT; at most `MAX_ABSTRACT_SENTS` are
kept (the likeliest by max(P(SUPPORT), P(CONTRADICT))), and the abstract's label is SUPPORT or CONTRADICT by the
larger summed probability over them (NEI when none is selected).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tools.embedder.verifier import SUPPORT_LABELS, VerifierSpec, label_of

MAX_ABSTRACT_SENTS = 3
"""Most predicted sentences per abstract the scorer credits at the abstract level (and this module predicts)."""

NEI = SUPPORT_LABELS[2]


@dataclass(frozen=True)
class GoldDoc:
    """A claim's gold evidence in one abstract: its label and rationales (each a set of sentence indices)."""

    label: str
    rationales: tuple[frozenset[int], ...]


@dataclass(frozen=True)
class DocPrediction:
    """A predicted label for one (claim, abstract) and the predicted rationale sentence indices."""

    label: str
    rationale: tuple[int, ...]


Gold = Mapping[str, GoldDoc]
"""doc id -> gold evidence of one claim (abstracts without evidence are absent)."""
Predicted = Mapping[str, DocPrediction]
"""doc id -> prediction for one claim."""


def count_rationale_sents(predicted: set[int], gold: Sequence[frozenset[int]]) -> int:
    """Predicted sentences that lie in a gold rationale all of whose sentences are predicted."""
    correct = 0
    for index in predicted:
        sets = [g for g in gold if index in g]
        if sets and sets[0].issubset(predicted):
            correct += 1
    return correct


def sentence_counts(pairs: Iterable[tuple[Predicted, Gold]]) -> Counter[str]:
    """Sentence-level counts over claims: `relevant`, `retrieved`, `correct_selection`, `correct_label`."""
    counts: Counter[str] = Counter()
    for predicted, gold in pairs:
        counts["relevant"] += sum(len(r) for doc in gold.values() for r in doc.rationales)
        for doc_id, pred in predicted.items():
            if pred.label == NEI:
                continue
            counts["retrieved"] += len(pred.rationale)
            if doc_id not in gold:
                continue
            n = count_rationale_sents(set(pred.rationale), gold[doc_id].rationales)
            counts["correct_selection"] += n
            counts["correct_label"] += n * int(pred.label == gold[doc_id].label)
    return counts


def abstract_counts(pairs: Iterable[tuple[Predicted, Gold]]) -> Counter[str]:
    """Abstract-level counts over claims: `relevant`, `retrieved`, `correct_label_only`, `correct_rationalized`
    (only the first `MAX_ABSTRACT_SENTS` predicted sentences count towards a rationale)."""
    counts: Counter[str] = Counter()
    for predicted, gold in pairs:
        counts["relevant"] += len(gold)
        for doc_id, pred in predicted.items():
            if pred.label == NEI:
                continue
            counts["retrieved"] += 1
            if doc_id not in gold or pred.label != gold[doc_id].label:
                continue
            counts["correct_label_only"] += 1
            first = set(pred.rationale[:MAX_ABSTRACT_SENTS])
            counts["correct_rationalized"] += int(any(r.issubset(first) for r in gold[doc_id].rationales))
    return counts


def prf(counts: Mapping[str, int], correct: str) -> dict[str, float]:
    """Precision, recall and F1 of `counts[correct]` against `retrieved` and `relevant` (0 where undefined; the
    official scorer divides by zero there)."""
    hit, retrieved, relevant = counts.get(correct, 0), counts.get("retrieved", 0), counts.get("relevant", 0)
    precision = hit / retrieved if retrieved else 0.0
    recall = hit / relevant if relevant else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4)}


def predict_abstract(probs: npt.NDArray[np.float32], spec: VerifierSpec) -> DocPrediction:
    """The prediction for one (claim, abstract) from its sentences' probabilities (module docstring).

    Args:
        probs: `(n_sentences, 3)` probabilities of (claim, sentence i), `SUPPORT_LABELS` order.
    """
    labelled = [label_of(row, spec) for row in probs]
    chosen = [i for i, (label, _) in enumerate(labelled) if label != NEI]
    chosen = sorted(chosen, key=lambda i: -float(max(probs[i, 0], probs[i, 1])))[:MAX_ABSTRACT_SENTS]
    if not chosen:
        return DocPrediction(NEI, ())
    support, contradict = probs[chosen, 0].sum(), probs[chosen, 1].sum()
    return DocPrediction(SUPPORT_LABELS[0] if support >= contradict else SUPPORT_LABELS[1], tuple(sorted(chosen)))


def predict_by_similarity(similarity: npt.NDArray[np.float32], threshold: float) -> DocPrediction:
    """The no-training baseline's prediction (RAGFlow's rule: a sentence is evidence when its embedding's cosine
    similarity to the claim's is at least `threshold`): the at most `MAX_ABSTRACT_SENTS` most similar such sentences,
    labelled SUPPORT (the rule cannot say CONTRADICT); NEI when none.

    Args:
        similarity: `(n_sentences,)` cosine similarities.
    """
    chosen = [int(i) for i in np.argsort(-similarity, kind="stable") if similarity[i] >= threshold]
    chosen = chosen[:MAX_ABSTRACT_SENTS]
    return DocPrediction(SUPPORT_LABELS[0], tuple(sorted(chosen))) if chosen else DocPrediction(NEI, ())


def selection_scores(pairs: Sequence[tuple[Predicted, Gold]]) -> dict[str, dict[str, float]]:
    """Sentence selection and selection + label P/R/F1 and the abstract-level ones, by the official rules."""
    sentences = sentence_counts(pairs)
    abstracts = abstract_counts(pairs)
    return {
        "sentence_selection": prf(sentences, "correct_selection"),
        "sentence_selection_label": prf(sentences, "correct_label"),
        "abstract_label_only": prf(abstracts, "correct_label_only"),
        "abstract_rationalized": prf(abstracts, "correct_rationalized"),
    }


THRESHOLD_GRID = tuple(round(0.05 * i, 2) for i in range(2, 20))
"""Candidate thresholds (0.10 ... 0.95) searched by `tune_thresholds` and `tune_similarity`."""


def tune_thresholds(
    probs: Sequence[Mapping[str, npt.NDArray[np.float32]]], gold: Sequence[Gold], spec: VerifierSpec
) -> tuple[float, float, float]:
    """The (support, contradict) thresholds on `THRESHOLD_GRID` that maximise sentence selection + label F1
    (ties: the higher thresholds, i.e. the more precise rule), and that F1.

    Args:
        probs: per claim, doc id -> `(n_sentences, 3)` probabilities of its cited abstracts' sentences.
        gold: per claim, its gold evidence (same order).
        spec: the verifier (its thresholds are replaced).
    """
    from dataclasses import replace

    best = (-1.0, 0.0, 0.0)
    for s in THRESHOLD_GRID:
        for c in THRESHOLD_GRID:
            trial = replace(spec, support_threshold=s, contradict_threshold=c)
            pairs = [
                ({d: predict_abstract(p, trial) for d, p in docs.items()}, g)
                for docs, g in zip(probs, gold, strict=True)
            ]
            f1 = prf(sentence_counts(pairs), "correct_label")["f1"]
            best = max(best, (f1, s, c))
    return best[1], best[2], best[0]


def tune_similarity(
    similarity: Sequence[Mapping[str, npt.NDArray[np.float32]]], gold: Sequence[Gold]
) -> tuple[float, float]:
    """The cosine threshold (0.05 steps from 0.05 to 0.95) that maximises the baseline's sentence selection F1,
    and that F1 (ties: the higher threshold)."""
    best = (-1.0, 0.0)
    for t in (round(0.05 * i, 2) for i in range(1, 20)):
        pairs = [
            ({d: predict_by_similarity(s, t) for d, s in docs.items()}, g)
            for docs, g in zip(similarity, gold, strict=True)
        ]
        best = max(best, (prf(sentence_counts(pairs), "correct_selection")["f1"], t))
    return best[1], best[0]


def label_scores(gold: Sequence[str], predicted: Sequence[str]) -> dict[str, object]:
    """Label accuracy (`label_accuracy_gold_inputs.py`: correct / all inputs) and per-class precision, recall and F1
    over `SUPPORT_LABELS` (scikit-learn's `precision_recall_fscore_support`, zero where undefined)."""
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    labels = list(SUPPORT_LABELS)
    precision, recall, f1, support = precision_recall_fscore_support(
        list(gold), list(predicted), labels=labels, zero_division=0
    )
    return {
        "accuracy": round(float(accuracy_score(list(gold), list(predicted))), 4),
        "n": len(gold),
        "per_class": {
            label: {
                "precision": round(float(precision[i]), 4),
                "recall": round(float(recall[i]), 4),
                "f1": round(float(f1[i]), 4),
                "n": int(support[i]),
            }
            for i, label in enumerate(labels)
        },
        "macro_f1": round(float(np.mean(f1)), 4),
    }
