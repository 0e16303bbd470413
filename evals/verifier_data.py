"""SciFact cases and training pairs for the support verifier (`evals/train_verifier.py`, `evals/support_eval.py`).

A *case* is one (claim, cited abstract) of a split: the claim, the abstract's sentences (`evals.scifact`'s sentence
spans), the claim's label and, where the abstract carries evidence, its rationales. Training pairs are (claim,
evidence text, label) built from the cases of the fit fold only (`training_examples`); the oracle inputs of NEI
claims are VeriSci's `oracle_tfidf` picks (`oracle_tfidf`); retrieval negatives come from a TF-IDF ranking of the
corpus (`tfidf_neighbours`), both with scikit-learn's `TfidfVectorizer`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from evals.scifact import (
    CorpusDoc,
    Query,
    SentenceSpans,
    abstract_sentences,
    load_qrels,
    load_queries,
)
from evals.support_metrics import NEI, GoldDoc
from tools.embedder.verifier import SUPPORT_LABELS

SUPPORT, CONTRADICT = SUPPORT_LABELS[0], SUPPORT_LABELS[1]
T = TypeVar("T")


@dataclass(frozen=True)
class Case:
    """One (claim, cited abstract) of a split.

    Attributes:
        claim_id, claim: the claim.
        doc_id: the cited abstract.
        sentences: the abstract's sentences (index i is SciFact's sentence i).
        claim_label: the claim's label (all its evidence shares one; NEI for a claim without evidence).
        gold: the abstract's evidence (label and rationales), or None when it has none.
    """

    claim_id: str
    claim: str
    doc_id: str
    sentences: tuple[str, ...]
    claim_label: str
    gold: GoldDoc | None


def split_cases(
    split: str, corpus: dict[str, CorpusDoc], spans: SentenceSpans, queries: Sequence[Query] | None = None
) -> list[Case]:
    """The cases of `split` (`load_queries`, cited abstracts from `qrels/<split>.tsv`, sorted by doc id), in claim
    order; `queries` restricts them to those claims.

    Raises:
        DatasetError: as `load_queries` / `abstract_sentences`.
    """
    qrels = load_qrels(split)
    cases: list[Case] = []
    for query in queries if queries is not None else load_queries(split):  # type: ignore[arg-type]
        labels = {e.label for e in query.evidence}
        claim_label = labels.pop() if labels else NEI
        for doc_id in sorted(qrels[query.query_id]):
            rationales = tuple(frozenset(e.sentences) for e in query.evidence if e.doc_id == doc_id)
            gold = GoldDoc(claim_label, rationales) if rationales else None
            sentences = tuple(abstract_sentences(corpus[doc_id], spans))
            cases.append(Case(query.query_id, query.text, doc_id, sentences, claim_label, gold))
    return cases


def split_claims(queries: Sequence[Query], held_out: float, seed: int) -> tuple[list[Query], list[Query]]:
    """(fit fold, held-out fold): a seeded shuffle (`random.Random(seed)`) of `queries`, the last `held_out` share
    held out; each fold in the original order."""
    order = list(range(len(queries)))
    random.Random(seed).shuffle(order)
    cut = len(order) - round(held_out * len(order))
    fit, rest = sorted(order[:cut]), sorted(order[cut:])
    return [queries[i] for i in fit], [queries[i] for i in rest]


def oracle_tfidf(claim: str, sentences: Sequence[str], k: int = 2) -> list[int]:
    """VeriSci's rationale inputs for an abstract without evidence (`rationale_selection/oracle_tfidf.py` of
    github.com/allenai/scifact): a `TfidfVectorizer(stop_words='english')` fitted on the abstract's sentences, the
    `k` sentences with the largest dot product with the claim's vector, as sorted indices."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(stop_words="english")
    vectors = vectorizer.fit_transform(list(sentences))
    claim_vector = vectorizer.transform([claim]).todense()
    scores = np.asarray(vectors @ claim_vector.T).reshape(-1)
    top: list[int] = scores.argsort()[-k:][::-1].tolist()
    return sorted(top)


def gold_inputs(case: Case) -> list[int]:
    """The sentence indices VeriSci's label-accuracy protocol reads for `case` (`script/label-prediction.sh`): all
    gold rationale sentences of the abstract (flattened, in annotation order as VeriSci; returned sorted here), or the
    `oracle_tfidf` top 2 when the abstract has no evidence."""
    if case.gold is not None:
        return sorted({i for r in case.gold.rationales for i in r})
    return oracle_tfidf(case.claim, case.sentences)


def tfidf_neighbours(queries: Sequence[Query], corpus: dict[str, CorpusDoc], depth: int) -> dict[str, list[str]]:
    """Claim id -> the `depth` abstracts most similar to the claim, best first: cosine of scikit-learn
    `TfidfVectorizer(stop_words='english', sublinear_tf=True)` vectors of the corpus documents (title and text) and
    of the claim. Deterministic; no server."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    ids = list(corpus)
    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True)
    docs = vectorizer.fit_transform([corpus[d].content for d in ids])
    scores = (vectorizer.transform([q.text for q in queries]) @ docs.T).toarray()
    return {
        q.query_id: [ids[int(i)] for i in np.argsort(-scores[row], kind="stable")[:depth]]
        for row, q in enumerate(queries)
    }


@dataclass(frozen=True)
class Example:
    """One training pair: (claim, evidence text) and its label (one of `SUPPORT_LABELS`); `kind` says where it came
    from (for the record's counts)."""

    claim: str
    evidence: str
    label: str
    kind: str


def training_examples(
    cases: Sequence[Case],
    neighbours: dict[str, list[str]],
    corpus: dict[str, CorpusDoc],
    spans: SentenceSpans,
    seed: int,
    nei_claim_sentences: int = 3,
    retrieved_docs: int = 1,
    retrieved_sentences: int = 2,
) -> list[Example]:
    """Training pairs from `cases` (the fit fold's), per (claim, cited abstract):

    - with evidence: each gold rationale (its sentences joined by " ") with the claim's label (`rationale`), each
      single rationale sentence with that label (`rationale_sentence`), every other sentence of the abstract as
      NEI (`other_sentence`);
    - without evidence (NEI claims, or an uncited-evidence abstract): the `oracle_tfidf` top 2 joined, as NEI
      (`oracle_tfidf`), and `nei_claim_sentences` sentences drawn at random as NEI (`nei_abstract_sentence`);
    - per claim, `retrieved_sentences` random sentences of each of its first `retrieved_docs` TF-IDF neighbours
      that it does not cite, as NEI (`retrieved_sentence`).

    Draws come from `random.Random(seed)`, so the list is reproducible.
    """
    rng = random.Random(seed)
    out: list[Example] = []
    cited: dict[str, set[str]] = {}
    for case in cases:
        cited.setdefault(case.claim_id, set()).add(case.doc_id)
        if case.gold is not None:
            in_rationale: set[int] = set()
            for rationale in case.gold.rationales:
                ordered = sorted(rationale)
                text = " ".join(case.sentences[i] for i in ordered)
                out.append(Example(case.claim, text, case.gold.label, "rationale"))
                if len(ordered) > 1:
                    out += [
                        Example(case.claim, case.sentences[i], case.gold.label, "rationale_sentence") for i in ordered
                    ]
                in_rationale |= rationale
            out += [
                Example(case.claim, s, NEI, "other_sentence")
                for i, s in enumerate(case.sentences)
                if i not in in_rationale
            ]
        else:
            picks = oracle_tfidf(case.claim, case.sentences)
            out.append(Example(case.claim, " ".join(case.sentences[i] for i in picks), NEI, "oracle_tfidf"))
            drawn = rng.sample(range(len(case.sentences)), min(nei_claim_sentences, len(case.sentences)))
            out += [Example(case.claim, case.sentences[i], NEI, "nei_abstract_sentence") for i in sorted(drawn)]
    claims = {c.claim_id: c.claim for c in cases}
    for claim_id, claim in claims.items():
        others = [d for d in neighbours.get(claim_id, []) if d not in cited[claim_id]][:retrieved_docs]
        for doc_id in others:
            sentences = abstract_sentences(corpus[doc_id], spans)
            drawn = rng.sample(range(len(sentences)), min(retrieved_sentences, len(sentences)))
            out += [Example(claim, sentences[i], NEI, "retrieved_sentence") for i in sorted(drawn)]
    return out


def claim_pairs(
    cases: Sequence[Case], per_case: Sequence[dict[str, T]]
) -> list[tuple[dict[str, T], dict[str, GoldDoc]]]:
    """(doc id -> value, gold) per claim, in claim order: the per-case values (e.g. `{doc_id: DocPrediction}`) and the
    gold evidence of one claim's cases merged, as the official scorer reads a claim."""
    by_claim: dict[str, tuple[dict[str, T], dict[str, GoldDoc]]] = {}
    for case, prediction in zip(cases, per_case, strict=True):
        predicted, gold = by_claim.setdefault(case.claim_id, ({}, {}))
        predicted.update(prediction)
        if case.gold is not None:
            gold[case.doc_id] = case.gold
    return list(by_claim.values())


_SWAPS = (
    ("increases", "decreases"),
    ("increase", "decrease"),
    ("increased", "decreased"),
    ("higher", "lower"),
    ("raises", "lowers"),
    ("promotes", "inhibits"),
    ("positively", "negatively"),
    ("enhances", "reduces"),
    ("improves", "worsens"),
    ("better", "worse"),
    ("activates", "inhibits"),
)
"""Word swaps that turn a claim into its contrary (either direction), tried before inserting "not"."""
_AUXILIARY = re.compile(r"\b(is|are|was|were|can|does|do|has|have|will|may)\b")


def negated_claim(claim: str) -> str | None:
    """A rule-based contrary of `claim`: its first word of a contrary pair (`_SWAPS`, e.g. increases -> decreases)
    swapped, else "not" after its first auxiliary verb (is, are, can, does, ...); None when neither applies. The
    SciFact claims that CONTRADICT were written the same way by its annotators (Wadden et al. 2020, section 3:
    "negations" of supported claims), so a negated SUPPORT claim with the same rationale is a CONTRADICT pair and
    vice versa."""
    for a, b in _SWAPS:
        for word, contrary in ((a, b), (b, a)):
            match = re.search(rf"\b{word}\b", claim)
            if match is not None:
                return claim[: match.start()] + contrary + claim[match.end() :]
    match = _AUXILIARY.search(claim)
    if match is None:
        return None
    return claim[: match.end()] + " not" + claim[match.end() :]


def negated_examples(examples: Sequence[Example]) -> list[Example]:
    """For each whole-rationale SUPPORT or CONTRADICT pair, the pair of its negated claim (`negated_claim`) with the
    same evidence and the other of the two labels (`kind` "negated")."""
    out: list[Example] = []
    for example in examples:
        if example.kind != "rationale" or example.label not in (SUPPORT, CONTRADICT):
            continue
        negated = negated_claim(example.claim)
        if negated is not None:
            flipped = CONTRADICT if example.label == SUPPORT else SUPPORT
            out.append(Example(negated, example.evidence, flipped, "negated"))
    return out
