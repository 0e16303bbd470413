"""Per-sentence support: which retrieved sentence supports (or contradicts) each sentence of an answer.

The check runs in two stages, as retrieve-then-verify fact checkers do (Wadden et al., "Fact or Fiction: Verifying
Scientific Claims", EMNLP 2020: rationale selection, then label prediction):

1. **Candidates (cheap)**: every passage is split into sentences (`tools.sentences`); a `SentenceSimilarity` scores
   each answer sentence against each passage sentence, and the highest-scoring passage sentences are its candidates
   (`candidates` of them), plus the best sentence of each passage the answer sentence itself cites, so a cited
   passage is always heard. Two similarities: `LexicalSimilarity` (Okapi BM25 over the answer's own passage
   sentences, no server: the default, measured better and ~free) and `EmbeddingSimilarity` (cosine of the
   embedder's vectors, one embedder call per answer).
2. **Verdict**: a cross-encoder (`PairClassifier`, the verifier served by Triton) reads each (answer sentence,
   candidate) pair and gives the probabilities of SUPPORT, CONTRADICT and NOT_ENOUGH_INFO. `DecisionRule` turns
   them into a label per pair; the sentence takes the best SUPPORT pair, else the best CONTRADICT pair, else
   NOT_ENOUGH_INFO with its most probable supporting candidate as the closest evidence.

Nothing here talks to a server: the embedder and the verifier are protocols (`TextEmbedder`, `PairClassifier`);
`tools.in_memory_support` has doubles for tests.

Candidate choice measured on SciFact test (150 claims with evidence, their cited abstracts' sentences): a gold
rationale sentence is among the top 1 / 3 / 5 for 0.500 / 0.827 / 0.893 of the claims by BM25, 0.400 / 0.640 /
0.800 by all-MiniLM-L6-v2 cosine; and the embedder call was 583 ms of the check's 658 ms p50 on this CPU
(`rag bench support`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from tools.sentences import split_sentences

SupportLabel = Literal["SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO"]
"""A sentence's verdict against its evidence (SciFact's three labels)."""

LABELS: tuple[SupportLabel, SupportLabel, SupportLabel] = ("SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO")
"""The verifier's output columns, in order."""


class TextEmbedder(Protocol):
    """What candidate selection needs of the embedder (`tools.embedder.TritonEmbedder`)."""

    async def embed(
        self, texts: Sequence[str], kind: Literal["query", "document"] = "document"
    ) -> npt.NDArray[np.float32]:
        """`(len(texts), dim)` float32 L2-normalised embeddings, in order."""
        ...


class PairClassifier(Protocol):
    """What the verdict needs of the verifier (`tools.embedder.verifier.TritonVerifier`)."""

    async def classify(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        """`(len(pairs), 3)` float32 probabilities of SUPPORT, CONTRADICT, NOT_ENOUGH_INFO for each (claim,
        evidence) pair."""
        ...


class SentenceSimilarity(Protocol):
    """Scores answer sentences (or the question) against passage sentences: higher is more alike."""

    async def scores(self, queries: Sequence[str], sentences: Sequence[str]) -> npt.NDArray[np.float32]:
        """`(len(queries), len(sentences))` float32 scores."""
        ...


_WORD = re.compile(r"\w+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "and",
        "or",
        "to",
        "for",
        "with",
        "by",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "that",
        "this",
        "these",
        "those",
        "as",
        "at",
        "from",
        "it",
        "its",
        "which",
        "their",
        "there",
        "than",
        "into",
        "such",
        "may",
        "can",
        "also",
        "not",
        "no",
        "nor",
    ]
)
"""Words that carry no content for sentence matching (lower case)."""


def content_words(text: str) -> list[str]:
    """The lower-cased `\\w+` words of `text` outside `STOPWORDS`, in order."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class LexicalSimilarity:
    """Okapi BM25 of each query against the sentences as the collection (Robertson and Zaragoza, "The Probabilistic
    Relevance Framework: BM25 and Beyond", 2009; Lucene's idf ln(1 + (N - df + 0.5) / (df + 0.5))), with `k1` and
    `b`; the collection is only the answer's passage sentences, so idf is local to what was retrieved. No server."""

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b

    async def scores(self, queries: Sequence[str], sentences: Sequence[str]) -> npt.NDArray[np.float32]:
        """`(len(queries), len(sentences))` float32 BM25 scores (0 where no content word is shared)."""
        docs = [content_words(s) for s in sentences]
        out = np.zeros((len(queries), len(docs)), dtype=np.float32)
        if not docs:
            return out
        df: dict[str, int] = {}
        for words in docs:
            for word in set(words):
                df[word] = df.get(word, 0) + 1
        n = len(docs)
        idf = {w: math.log(1.0 + (n - k + 0.5) / (k + 0.5)) for w, k in df.items()}
        avgdl = max(1e-9, sum(len(d) for d in docs) / n)
        counts = [{w: d.count(w) for w in set(d)} for d in docs]
        for row, query in enumerate(queries):
            terms = set(content_words(query))
            for col, (words, tf) in enumerate(zip(docs, counts, strict=True)):
                norm = self.k1 * (1.0 - self.b + self.b * len(words) / avgdl)
                out[row, col] = sum(idf[t] * tf[t] * (self.k1 + 1.0) / (tf[t] + norm) for t in terms if t in tf)
        return out


class EmbeddingSimilarity:
    """Cosine similarity of the embedder's L2-normalised vectors (`TextEmbedder`), queries and sentences embedded in
    one call."""

    def __init__(self, embedder: TextEmbedder) -> None:
        self.embedder = embedder

    async def scores(self, queries: Sequence[str], sentences: Sequence[str]) -> npt.NDArray[np.float32]:
        """`(len(queries), len(sentences))` float32 cosines."""
        if not queries or not sentences:
            return np.zeros((len(queries), len(sentences)), dtype=np.float32)
        vectors = await self.embedder.embed([*queries, *sentences], kind="document")
        cosine: npt.NDArray[np.float32] = (vectors[: len(queries)] @ vectors[len(queries) :].T).astype(np.float32)
        return cosine


@dataclass(frozen=True)
class DecisionRule:
    """How the three probabilities of a pair become a label: SUPPORT when P(SUPPORT) reaches `support_threshold`,
    CONTRADICT when P(CONTRADICT) reaches `contradict_threshold`, the likelier of the two when both do (SUPPORT on a
    tie), NOT_ENOUGH_INFO when neither does. The shipped thresholds are chosen on SciFact train folds
    (`evals/results/verifier-training.json`).

    Raises:
        ValueError: a threshold outside [0, 1].
    """

    support_threshold: float = 0.5
    contradict_threshold: float = 0.5

    def __post_init__(self) -> None:
        for name in ("support_threshold", "contradict_threshold"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value}; expected a probability in [0, 1]")

    def label(self, probs: npt.NDArray[np.float32]) -> SupportLabel:
        """The label of one pair's `(3,)` probabilities (SUPPORT, CONTRADICT, NOT_ENOUGH_INFO)."""
        support, contradict = float(probs[0]), float(probs[1])
        supports, contradicts = support >= self.support_threshold, contradict >= self.contradict_threshold
        if supports and contradicts:
            return "SUPPORT" if support >= contradict else "CONTRADICT"
        if supports:
            return "SUPPORT"
        return "CONTRADICT" if contradicts else "NOT_ENOUGH_INFO"


@dataclass(frozen=True)
class EvidenceSentence:
    """One sentence of a retrieved passage: the passage's number, the sentence's span in the passage text, its text."""

    passage: int
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class PassageText:
    """What the check needs of a retrieved passage: its number and its text."""

    number: int
    text: str


def evidence_sentences(passages: Sequence[PassageText], language: str = "en") -> list[EvidenceSentence]:
    """Every sentence of every passage, passages in the given order (`tools.sentences.split_sentences`)."""
    return [
        EvidenceSentence(p.number, start, end, p.text[start:end])
        for p in passages
        for start, end in split_sentences(p.text, language)
    ]


@dataclass(frozen=True)
class Verdict:
    """One answer sentence's verdict.

    Attributes:
        label: SUPPORT, CONTRADICT or NOT_ENOUGH_INFO.
        score: the verifier's probability of `label` for the chosen pair (0..1).
        evidence: the supporting or contradicting sentence; for NOT_ENOUGH_INFO the candidate with the highest
            P(SUPPORT) (the closest the passages come), None when there was no candidate.
        probs: the chosen pair's (SUPPORT, CONTRADICT, NOT_ENOUGH_INFO) probabilities.
    """

    label: SupportLabel
    score: float
    evidence: EvidenceSentence | None
    probs: tuple[float, float, float] = (0.0, 0.0, 1.0)


@dataclass(frozen=True)
class CheckOptions:
    """Sizes of the check.

    Attributes:
        candidates: passage sentences per answer sentence by embedding similarity (besides the best one of each
            passage the sentence cites); each is one verifier pair.
        max_pairs_per_sentence: upper bound on pairs per answer sentence, cited passages' sentences included.
        rule: the pair decision rule.
    """

    candidates: int = 3
    max_pairs_per_sentence: int = 5
    rule: DecisionRule = DecisionRule()

    def __post_init__(self) -> None:
        if self.candidates < 1 or self.max_pairs_per_sentence < self.candidates:
            raise ValueError(
                f"candidates={self.candidates}, max_pairs_per_sentence={self.max_pairs_per_sentence}; expected "
                "candidates >= 1 and max_pairs_per_sentence >= candidates"
            )


@dataclass(frozen=True)
class CheckResult:
    """Verdicts of the claims in order, the similarity score of `extra` texts (e.g. the question) to every evidence
    sentence (`(len(extra), len(evidence))` float32), the evidence sentences and the verifier pairs run."""

    verdicts: list[Verdict]
    extra_similarity: npt.NDArray[np.float32]
    evidence: list[EvidenceSentence]
    pairs: int


def candidate_indices(
    similarity: npt.NDArray[np.float32],
    evidence: Sequence[EvidenceSentence],
    cited: Sequence[Sequence[int]],
    options: CheckOptions,
) -> list[list[int]]:
    """Per claim, the evidence indices its pairs use: the best sentence of each passage the claim cites (best
    passage first), then the `candidates` most similar sentences overall, without repeats, at most
    `max_pairs_per_sentence`.

    Args:
        similarity: `(claims, evidence)` similarity scores (higher is more alike).
        cited: per claim, the passage numbers it cites.
    """
    out: list[list[int]] = []
    passage_of = np.array([e.passage for e in evidence])
    for row, numbers in zip(similarity, cited, strict=True):
        order = [int(i) for i in np.argsort(-row, kind="stable")]
        chosen: list[int] = []
        for number in numbers:
            best = next((i for i in order if passage_of[i] == number), None)
            if best is not None and best not in chosen:
                chosen.append(best)
        top = [i for i in order if i not in chosen][: options.candidates]
        chosen = sorted(chosen, key=lambda i: -row[i]) + top
        out.append(chosen[: options.max_pairs_per_sentence])
    return out


async def check_claims(
    claims: Sequence[str],
    cited: Sequence[Sequence[int]],
    passages: Sequence[PassageText],
    similarity: SentenceSimilarity,
    classifier: PairClassifier,
    options: CheckOptions | None = None,
    extra: Sequence[str] = (),
    language: str = "en",
) -> CheckResult:
    """The verdict of each claim (an answer sentence without its markers) against the passages' sentences.

    One `similarity` call scores the claims and `extra` against every passage sentence; one verifier call
    classifies every chosen pair.

    Args:
        claims: non-blank sentences to check.
        cited: per claim, the passage numbers it cites (may be empty).
        passages: the retrieved passages the claims may rest on.
        extra: more texts to compare with the evidence sentences by similarity only (e.g. the question, for an
            extractive answer).

    Raises:
        ValueError: `cited` has another length than `claims`, or a blank claim.
        Whatever the similarity or classifier raise (e.g. `tools.errors.EmbedderError`).
    """
    options = options or CheckOptions()
    if len(cited) != len(claims):
        raise ValueError(f"cited has {len(cited)} entries for {len(claims)} claims; expected one per claim")
    if any(not c.strip() for c in claims):
        raise ValueError("a claim is blank; expected non-blank sentences")
    evidence = evidence_sentences(passages, language)
    if not evidence or not (claims or extra):
        return CheckResult(
            [Verdict("NOT_ENOUGH_INFO", 1.0, None) for _ in claims],
            np.zeros((len(extra), len(evidence)), dtype=np.float32),
            evidence,
            0,
        )
    scored = await similarity.scores([*claims, *extra], [e.text for e in evidence])
    picks = candidate_indices(scored[: len(claims)], evidence, cited, options)
    pairs = [(claim, evidence[i].text) for claim, chosen in zip(claims, picks, strict=True) for i in chosen]
    probs = await classifier.classify(pairs) if pairs else np.zeros((0, 3), dtype=np.float32)
    if probs.shape != (len(pairs), 3):
        raise ValueError(f"the verifier returned probabilities of shape {probs.shape} for {len(pairs)} pairs")
    verdicts: list[Verdict] = []
    at = 0
    for chosen in picks:
        rows = probs[at : at + len(chosen)]
        at += len(chosen)
        verdicts.append(_verdict(rows, [evidence[i] for i in chosen], options.rule))
    return CheckResult(verdicts, scored[len(claims) :], evidence, len(pairs))


def _verdict(rows: npt.NDArray[np.float32], chosen: Sequence[EvidenceSentence], rule: DecisionRule) -> Verdict:
    """The sentence's verdict from its pairs (`rows` `(len(chosen), 3)`): best SUPPORT, else best CONTRADICT, else
    NOT_ENOUGH_INFO with the candidate of highest P(SUPPORT); ties keep the earlier (cited, then more similar)."""
    if not chosen:
        return Verdict("NOT_ENOUGH_INFO", 1.0, None)
    labels = [rule.label(r) for r in rows]
    for label, column in (("SUPPORT", 0), ("CONTRADICT", 1)):
        best = max((i for i, lab in enumerate(labels) if lab == label), key=lambda i: rows[i, column], default=None)
        if best is not None:
            return Verdict(label, float(rows[best, column]), chosen[best], _probs(rows[best]))  # type: ignore[arg-type]
    best = int(np.argmax(rows[:, 0]))
    return Verdict("NOT_ENOUGH_INFO", float(rows[best, 2]), chosen[best], _probs(rows[best]))


def _probs(row: npt.NDArray[np.float32]) -> tuple[float, float, float]:
    return (float(row[0]), float(row[1]), float(row[2]))
