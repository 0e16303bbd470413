"""The support check of an answer (`SUPPORT_CHECK`): every sentence labelled against the retrieved passages, its
citation pointed at the sentence that supports it, repeats collapsed, and, when nothing is supported, quotes instead
of the model's words.

After the model's answer is rendered (`agent.core.citations`), `SupportChecker.check`:

1. splits the answer into sentences (`tools.sentences`), reads each sentence's `[n]` markers and its claim (the
   sentence without markers and list numbering);
2. drops a sentence whose claim repeats an earlier one (case, spacing and punctuation ignored); a question (ending
   with `?`) is no claim: it stays, labelled NOT_ENOUGH_INFO without a verifier call;
3. labels each remaining claim with `tools.support.check_claims` (BM25 or embedder candidates, then the verifier);
4. rewrites the markers: a SUPPORT sentence cites the passage of its supporting sentence (`repointed` when that
   differs from what the model wrote, markers added when it wrote none); other sentences keep their markers and are
   marked unsupported (`flag`) or removed (`strict`, the answer then says how many);
5. when no sentence is supported, the answer becomes extractive: the evidence sentences most similar to the
   question, quoted with their citations and introduced as what the documents say.

`SupportReport.sentences` gives each sentence of the returned text its span in it; the check's own lines (the
extractive answer's first line, `strict`'s note of how many sentences it removed) are not sentences of the answer
and have no entry.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from agent.core.results import (
    SentenceEvidence,
    SentenceSupport,
    SupportLabel,
    SupportMode,
    SupportReport,
    location_fields,
)
from tools.highlight import sentence_boxes
from tools.retrieval import Passage
from tools.sentences import split_sentences
from tools.support import (
    CheckOptions,
    EvidenceSentence,
    PairClassifier,
    PassageText,
    SentenceSimilarity,
    Verdict,
    check_claims,
)

_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_LIST_PREFIX = re.compile(r"^\s*(?:[-*•]|\(?\d{1,2}[.)])\s+")
_WORD = re.compile(r"\w+")

EXTRACTIVE_INTRO = "No sentence of the generated answer is supported by the documents. What they say:"
"""The first line of an extractive answer (the quotes follow, one per line)."""

QUOTES = 2
"""Evidence sentences an extractive answer quotes."""


def removed_note(count: int) -> str:
    """The line a `strict` answer ends with when it removed `count` (>= 1) unsupported sentences."""
    noun = "sentence" if count == 1 else "sentences"
    return f"({count} {noun} without support in the documents removed.)"


@dataclass(frozen=True)
class AnswerSentence:
    """One sentence of a rendered answer: its span, its text, its markers' passage numbers, its claim, and the
    whitespace between it and the sentence before (`gap`, "" for the first)."""

    start: int
    end: int
    text: str
    cited: tuple[int, ...]
    claim: str
    gap: str = ""


_LIST_NUMBER = re.compile(r"^(\d+)([.)]\s)")


def renumbered(sentences: Sequence[AnswerSentence]) -> list[AnswerSentence]:
    """`sentences` with their list numbers (`1. `, `2) `) counted again from 1 in order: after repeated items are
    collapsed, a numbered answer reads 1, 2, 3, not 1, 3, 4. Sentences without a list number are kept as they are."""
    out: list[AnswerSentence] = []
    count = 0
    for sentence in sentences:
        marker = _LIST_NUMBER.match(sentence.text)
        if marker is None:
            out.append(sentence)
            continue
        count += 1
        out.append(replace(sentence, text=f"{count}{marker.group(2)}{sentence.text[marker.end() :]}"))
    return out


def answer_sentences(text: str) -> list[AnswerSentence]:
    """The sentences of a rendered answer (markers are `[n]` or `[n, m]`), each with its cited passage numbers
    (first-mention order) and its claim: the text without markers and a leading list number or bullet."""
    out = []
    previous = 0
    for start, end in split_sentences(text):
        gap = text[previous:start]
        previous = end
        sentence = text[start:end]
        cited: list[int] = []
        for match in _MARKER.finditer(sentence):
            cited += [int(n) for n in re.split(r"\s*,\s*", match.group(1)) if int(n) not in cited]
        claim = _LIST_PREFIX.sub("", _MARKER.sub("", sentence))
        claim = re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"\s{2,}", " ", claim)).strip()
        out.append(AnswerSentence(start, end, sentence, tuple(cited), claim, gap if gap.isspace() else " "))
    return out


def repeat_key(claim: str) -> str:
    """What two claims share when one repeats the other: their words, lower-cased."""
    return " ".join(w.lower() for w in _WORD.findall(claim))


@dataclass(frozen=True)
class CheckedAnswer:
    """The answer after the check: its text, the passage numbers it cites (first-mention order), the report."""

    text: str
    cited: list[int]
    report: SupportReport


class SupportChecker:
    """Runs the support check over one sentence similarity and one verifier (built once per app, `agent.core.wiring`).

    Args:
        similarity: picks candidate evidence sentences (`tools.support.SentenceSimilarity`: BM25 or the embedder).
        classifier: the verifier (`tools.support.PairClassifier`).
        options: candidates per sentence and the decision rule.
        mode: the app's default mode (`SUPPORT_CHECK`).
        max_sentences: sentences labelled at most (`SUPPORT_MAX_SENTENCES`); later ones are NOT_ENOUGH_INFO without
            a verifier call.
    """

    def __init__(
        self,
        similarity: SentenceSimilarity,
        classifier: PairClassifier,
        options: CheckOptions | None = None,
        mode: SupportMode = "flag",
        max_sentences: int = 12,
    ) -> None:
        self.similarity, self.classifier = similarity, classifier
        self.options = options or CheckOptions()
        self.mode: SupportMode = mode
        self.max_sentences = max_sentences

    async def check(
        self, question: str, text: str, passages: Sequence[Passage], mode: SupportMode | None = None
    ) -> CheckedAnswer:
        """Label and repair `text` (a rendered answer citing `passages` by number); see the module docstring.

        Returns:
            the answer as it should be shown, the passages it cites, and the report (`SupportReport`). Mode `off`
            returns `text` unchanged with an empty report.

        Raises:
            tools.errors.EmbedderError: the embedder or the verifier failed.
        """
        mode = mode or self.mode
        if mode == "off":
            return CheckedAnswer(text, _cited_numbers(text), SupportReport(mode="off", generated=text))
        sentences = answer_sentences(text)
        seen: set[str] = set()
        kept: list[AnswerSentence] = []
        for sentence in sentences:
            key = repeat_key(sentence.claim)
            if key and key in seen:
                continue
            seen.add(key)
            kept.append(sentence)
        repeated = len(sentences) - len(kept)
        if repeated:
            kept = renumbered(kept)
        checkable = [s for s in kept if s.claim and not s.claim.endswith("?")][: self.max_sentences]
        by_number = {p.number: p for p in passages}
        result = await check_claims(
            [s.claim for s in checkable],
            [[n for n in s.cited if n in by_number] for s in checkable],
            [PassageText(p.number, p.text) for p in passages],
            self.similarity,
            self.classifier,
            self.options,
            extra=[question],
        )
        verdicts = {id(s): v for s, v in zip(checkable, result.verdicts, strict=True)}
        no_claim = Verdict("NOT_ENOUGH_INFO", 1.0, None)
        checked = [(s, verdicts.get(id(s), no_claim)) for s in kept]
        supported = sum(v.label == "SUPPORT" for _, v in checked)
        report = SupportReport(mode=mode, repeated=repeated, generated=text, supported=supported)
        report.unsupported = len(checked) - supported
        if checked and supported == 0:
            return self._extractive(result.extra_similarity[0], result.evidence, by_number, report)
        pieces: list[tuple[str, str, SentenceSupport | None]] = []
        for sentence, verdict in checked:
            if mode == "strict" and verdict.label != "SUPPORT":
                report.removed += 1
                continue
            shown, entry = _rewrite(sentence, verdict, by_number)
            report.repointed += entry.repointed
            pieces.append((sentence.gap if pieces else "", shown, entry))
        if report.removed:
            pieces.append(("\n\n" if pieces else "", removed_note(report.removed), None))
        return _assemble(pieces, report)

    async def verdict(self, claim: str, passages: Sequence[PassageText]) -> tuple[SupportLabel, float]:
        """The label of `claim` itself against `passages`' sentences (e.g. a SciFact claim against the passages its
        answer cites) and the verifier's probability of it; NOT_ENOUGH_INFO (1.0) without passages.

        Raises:
            tools.errors.EmbedderError: the embedder or the verifier failed.
        """
        if not passages or not claim.strip():
            return "NOT_ENOUGH_INFO", 1.0
        result = await check_claims(
            [claim], [[p.number for p in passages]], passages, self.similarity, self.classifier, self.options
        )
        found = result.verdicts[0]
        return found.label, found.score

    def _extractive(
        self,
        similarity: Sequence[float],
        items: Sequence[EvidenceSentence],
        by_number: dict[int, Passage],
        report: SupportReport,
    ) -> CheckedAnswer:
        """The extractive answer: the `QUOTES` evidence sentences most similar to the question, quoted."""
        order = sorted(range(len(items)), key=lambda i: -float(similarity[i]))[:QUOTES]
        if not order:
            return CheckedAnswer(report.generated, _cited_numbers(report.generated), report)
        report.extractive = True
        pieces: list[tuple[str, str, SentenceSupport | None]] = [("", EXTRACTIVE_INTRO, None)]
        for i in order:
            item = items[i]
            shown = f"“{item.text}” [{item.passage}]"
            pieces.append(
                (
                    "\n",
                    shown,
                    SentenceSupport(
                        index=0,
                        text=shown,
                        span=[0, 0],
                        label="SUPPORT",
                        score=1.0,
                        supported=True,
                        evidence=sentence_evidence(item.passage, item.start, item.end, by_number),
                        cited=[item.passage],
                        quote=True,
                    ),
                )
            )
        return _assemble(pieces, report)


def _rewrite(sentence: AnswerSentence, verdict: Verdict, by_number: dict[int, Passage]) -> tuple[str, SentenceSupport]:
    """The sentence as shown and its entry: a SUPPORT sentence cites exactly its supporting passage."""
    evidence = verdict.evidence
    written = list(sentence.cited)
    shown, cited, repointed = sentence.text, written, False
    if verdict.label == "SUPPORT" and evidence is not None:
        cited = [evidence.passage]
        repointed = written != cited
        if repointed:
            bare = _MARKER.sub("", sentence.text)
            bare = re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", bare)).rstrip()
            end = len(bare.rstrip(".!?;:"))
            shown = f"{bare[:end]} [{evidence.passage}]{bare[end:]}"
    label: SupportLabel = verdict.label
    entry = SentenceSupport(
        index=0,
        text=shown,
        span=[0, 0],
        label=label,
        score=round(verdict.score, 4),
        supported=label == "SUPPORT",
        evidence=None
        if evidence is None
        else sentence_evidence(evidence.passage, evidence.start, evidence.end, by_number),
        cited=cited,
        written=written,
        repointed=repointed,
    )
    return shown, entry


def sentence_evidence(number: int, start: int, end: int, by_number: dict[int, Passage]) -> SentenceEvidence:
    """The `SentenceEvidence` of `passage[start:end]`: its document span (the chunk's span start + offset, when the
    chunk's text is its document's text there) and its lines on the page (`tools.highlight.sentence_boxes`)."""
    passage = by_number[number]
    where = location_fields(passage.metadata)
    chunk_span = where.get("span")
    span = None
    if chunk_span is not None and chunk_span[1] - chunk_span[0] == len(passage.text):
        span = [chunk_span[0] + start, chunk_span[0] + end]
    boxes = where.get("boxes")
    lines = None
    if boxes:
        lines = [
            (int(b[0]), float(b[1]), float(b[2]), float(b[3]), float(b[4]))
            for b in sentence_boxes(passage.text, [list(b) for b in boxes], start, end)
        ]
    return SentenceEvidence(
        passage=number,
        doc_id=passage.doc_id,
        chunk_id=passage.chunk_id,
        title=passage.title,
        text=passage.text[start:end],
        passage_span=[start, end],
        span=span,
        page=where.get("page"),
        boxes=lines,
    )


def _assemble(pieces: Sequence[tuple[str, str, SentenceSupport | None]], report: SupportReport) -> CheckedAnswer:
    """Join (gap, shown text, entry) pieces and give each entry its index and span in the joined text; pieces
    without an entry are the check's own lines."""
    text = ""
    cited: list[int] = []
    entries: list[SentenceSupport] = []
    for gap, shown, entry in pieces:
        text += gap
        start = len(text)
        text += shown
        if entry is not None:
            entries.append(entry.model_copy(update={"index": len(entries), "span": [start, len(text)]}))
            cited += [n for n in entry.cited if n not in cited]
    report.sentences = entries
    return CheckedAnswer(text, cited, report)


def _cited_numbers(text: str) -> list[int]:
    cited: list[int] = []
    for match in _MARKER.finditer(text):
        cited += [int(n) for n in re.split(r"\s*,\s*", match.group(1)) if int(n) not in cited]
    return cited


def elapsed_ms(start: float) -> float:
    """Milliseconds since `start` (`time.perf_counter()`)."""
    return (time.perf_counter() - start) * 1000
