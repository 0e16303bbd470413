"""Answer quality and latency on SciFact claims, with pydantic-evals (`rag eval answers`).

Each case is a claim; the agent (through `RagApp.ask`, the real stack) is asked whether the documents support or
contradict it, citing abstracts. Scores per case (pydantic-evals evaluators):
- `verdict_correct`: the verdict parsed from the answer (SUPPORT / CONTRADICT / NOT_ENOUGH_INFO) equals the gold
  one (SciFact evidence labels; a claim without evidence is NOT_ENOUGH_INFO);
- `citation_precision` = |cited ∩ gold| / |cited| (claims with evidence and at least one citation) and
  `citation_recall` = |cited ∩ gold| / |gold| (claims with evidence), over abstract ids;
- `refused` (claims without evidence): the agent declined: no citation and a NOT_ENOUGH_INFO verdict.
Latency per stage comes from the answer's `timings_ms`; percentiles are numpy's `percentile(method="linear")`
(Hyndman & Fan type 7: p95 of one sample is that sample, never above the maximum), each reported with its n.

Cases from feedback (`rag eval export-feedback`, `evals.feedback_export`): a case with `inputs.question` is a user's
question, asked as written (searched with its recorded `retrieval_query`); its gold documents are the sources the
rating names (the up-voted answer's cited documents, or the "right source"), it has no gold verdict, and its metadata
carries the rated answer (`RatedAnswer`): each case's record then says what changed since (`changed_since_rated`:
retrieved and cited ids added and removed, refusal then and now), scored by `RatedAnswerEvaluator`.

Resuming: every answered case is appended to a journal (`AnswerJournal`, `answered.jsonl` in the run directory) as
soon as it is scored, so an interrupted run keeps what it answered; the same command run again asks the agent only
about the cases the journal lacks (failed cases are asked again) and scores the journal's answers as they were.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field
from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import Evaluator, EvaluatorContext
from pydantic_evals.lifecycle import CaseLifecycle
from pydantic_evals.reporting import EvaluationReport, ReportCase, ReportCaseFailure

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from agent.core.llm import bulk_model_settings
from agent.core.results import AskResult
from evals.scifact import SCIFACT_DIR, Split, load_queries
from tools.stats import percentiles as latency_percentiles
from tools.support import PassageText

Verdict = Literal["SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO"]
STAGES = ("embed", "search", "llm_ttft", "llm", "total")

QUESTION_TEMPLATE = (
    "Claim: {claim}\n"
    "Do the documents SUPPORT or CONTRADICT this claim? Begin your answer with SUPPORT, CONTRADICT or "
    "NOT ENOUGH INFO, then explain in one or two sentences citing the passages."
)


class EvalError(ValueError):
    """The evaluation cannot run as asked (e.g. an empty dataset); the message says why."""


class ClaimInputs(BaseModel):
    """A case's input: the claim text, or (a case from feedback) a question asked as written."""

    claim: str
    question: str | None = None
    """A user's question, asked verbatim instead of `QUESTION_TEMPLATE` around the claim (feedback cases)."""
    retrieval_query: str | None = None
    """What the question's answer searched with, when it differed from the question (a follow-up's query)."""


class RatedAnswer(BaseModel):
    """The rated answer a feedback case was made from (no API key, no token)."""

    answer_id: str
    rating: Literal["up", "down"]
    comment: str | None = None
    right_source: str | None = None
    what_was_wrong: str | None = None
    """For a down-vote: the comment, the right source, the refusal, in words."""
    answer: str = ""
    refused: bool = False
    cited_doc_ids: list[str] = Field(default_factory=list)
    cited_chunk_ids: list[str] = Field(default_factory=list)
    retrieved_chunk_ids: list[str] = Field(default_factory=list)
    rated_at: str = ""
    llm_model: str = ""
    corpus_version: dict[str, int] | None = None


class ClaimMetadata(BaseModel):
    """Gold labels of a claim: its verdict and the abstracts holding its evidence."""

    gold_verdict: Verdict | None = None
    """None for a case from feedback (a question, not a claim)."""
    gold_doc_ids: list[str] = Field(default_factory=list)
    rated: RatedAnswer | None = None
    """The rated answer of a case from feedback."""


class AnswerOutput(BaseModel):
    """What the task returns for one claim."""

    verdict: Verdict
    answer: str
    cited_doc_ids: list[str]
    refused: bool
    timings_ms: dict[str, float]
    truncated: bool = False
    """The model stopped at its output limit (`LLM_MAX_TOKENS`): the verdict was parsed from a cut answer."""
    sentences: int = 0
    """Sentences of the model's answer the support check labelled (0 when the check is off)."""
    supported_sentences: int = 0
    """Of those, the ones labelled SUPPORT."""
    repeated_sentences: int = 0
    """Repeats of an earlier sentence in the model's answer (collapsed by the check)."""
    sentence_cited_doc_ids: list[str] = Field(default_factory=list)
    """Documents of the evidence sentences of the answer's supported sentences and quotes (sentence-level
    citations), first-mention order."""
    label_verdict: Verdict | None = None
    """The verifier's label of the claim itself against the passages the answer cites (None: check off)."""
    extractive: bool = False
    """No sentence of the model's answer was supported: the answer quotes the evidence instead."""
    generated: str = ""
    """The model's answer before the support check ("" when the check is off: `answer` is the model's)."""
    cited_chunk_ids: list[str] = Field(default_factory=list)
    """Chunk ids of the citations, in passage order."""
    retrieved_chunk_ids: list[str] = Field(default_factory=list)
    """Chunk ids of every passage retrieved, cited or not, by passage number."""


AnswerDataset = Dataset[ClaimInputs, AnswerOutput, ClaimMetadata]


_NOT = r"(?:\bnot|n't|\bnever|\bneither|\bnor|\bcannot|\bfails?\s+to|\blacks?|\blacking|\bwithout)"
_GAP = r"(?:\s+[\w-]+){0,3}?\s+"  # up to three words between a negation and its verb: "do not clearly support"
_VERDICT_CUES: tuple[tuple[Verdict, str], ...] = (
    # Absence of evidence: negated verdict verbs, "unsupported", "no evidence", "not enough information", ...
    ("NOT_ENOUGH_INFO", rf"{_NOT}{_GAP}(?:support|confirm|contradict|refute|disprove|address|mention|cover|enough)\w*"),
    ("NOT_ENOUGH_INFO", r"\bno(?:\s+[\w-]+){0,2}?\s+(?:evidence|support|information|mention|data)\b"),
    (
        "NOT_ENOUGH_INFO",
        r"\bunsupported\b|\bnot enough info|\binsufficient\b|\bunclear\b|\binconclusive\b|\bundetermined\b"
        r"|\bunable to (?:determine|tell|say)\b|\bnot possible to (?:determine|tell|say)\b|\bcannot be determined\b",
    ),
    ("CONTRADICT", r"\bcontradict\w*|\brefut\w*|\bdisprov\w*|\bcontrary to\b|\binconsistent with\b|\bfalse\b"),
    ("SUPPORT", r"\bsupport\w*|\bconfirm\w*|\bcorroborat\w*|\bconsistent with\b"),
)
_VERDICT = re.compile("|".join(f"(?P<c{i}>{cue})" for i, (_, cue) in enumerate(_VERDICT_CUES)), re.IGNORECASE)


def parse_verdict(answer: str) -> Verdict:
    """The verdict an answer states first: the leftmost verdict phrase decides, negated forms before bare ones.

    SUPPORT: "SUPPORT", "supports", "confirms", "is consistent with", hedged forms ("may support"). CONTRADICT:
    "contradicts", "refutes", "disproves", "contrary to", "inconsistent with", "false". NOT_ENOUGH_INFO: "NOT
    ENOUGH INFO", a negated verdict verb ("do not support", "does not clearly support", "neither supports nor
    contradicts", "fails to confirm", "not contradicted"), "unsupported", "no evidence (to support it)",
    "insufficient", "unclear", "inconclusive", "do not cover", and any answer without a verdict phrase.
    An absence of support is NOT_ENOUGH_INFO, not CONTRADICT: only an explicit contradiction is. Tested on a table
    of phrasings (tests/evals/test_answers_eval.py).
    """
    match = _VERDICT.search(answer)
    if match is None or match.lastgroup is None:
        return "NOT_ENOUGH_INFO"
    return _VERDICT_CUES[int(match.lastgroup[1:])][0]


def scifact_dataset(split: Split = "test", root: Path = SCIFACT_DIR, ids: list[str] | None = None) -> AnswerDataset:
    """SciFact claims of `split` as pydantic-evals cases (gold verdict: SUPPORT if any evidence supports, else
    CONTRADICT if any contradicts, else NOT_ENOUGH_INFO); `ids` keeps only those claim ids, in that order."""
    queries = {q.query_id: q for q in load_queries(split, root)}
    order = ids if ids is not None else list(queries)
    cases = []
    for query_id in order:
        if query_id not in queries:
            raise EvalError(f"claim id {query_id!r} is not in the SciFact {split} split")
        query = queries[query_id]
        labels = {e.label for e in query.evidence}
        verdict: Verdict = "SUPPORT" if "SUPPORT" in labels else "CONTRADICT" if labels else "NOT_ENOUGH_INFO"
        gold_docs = sorted({e.doc_id for e in query.evidence})
        cases.append(
            Case(
                name=query_id,
                inputs=ClaimInputs(claim=query.text),
                metadata=ClaimMetadata(gold_verdict=verdict, gold_doc_ids=gold_docs),
            )
        )
    return AnswerDataset(
        name=f"scifact-{split}", cases=cases, evaluators=[VerdictEvaluator(), CitationEvaluator(), SupportEvaluator()]
    )


def load_cases(path: Path) -> AnswerDataset:
    """Cases from a YAML or JSON file in pydantic-evals' dataset format (see `cases.yaml` written by a run).

    Raises:
        EvalError: the file is missing or does not match the schema.
    """
    if not path.is_file():
        raise EvalError(f"cases file {path}: no such file")
    try:
        dataset = AnswerDataset.from_file(
            path,
            custom_evaluator_types=[VerdictEvaluator, CitationEvaluator, SupportEvaluator, RatedAnswerEvaluator],
        )
    except ValueError as exc:
        raise EvalError(f"cases file {path}: {exc}") from exc
    if not dataset.evaluators:
        dataset.evaluators = [VerdictEvaluator(), CitationEvaluator(), SupportEvaluator(), RatedAnswerEvaluator()]
    return dataset


@dataclass
class VerdictEvaluator(Evaluator[ClaimInputs, AnswerOutput, ClaimMetadata]):
    """`verdict_correct` (bool) for every case; `refused` (bool) for claims without evidence."""

    def evaluate(self, ctx: EvaluatorContext[ClaimInputs, AnswerOutput, ClaimMetadata]) -> dict[str, bool]:
        assert ctx.metadata is not None
        if ctx.metadata.gold_verdict is None:
            return {}
        result = {"verdict_correct": ctx.output.verdict == ctx.metadata.gold_verdict}
        if ctx.metadata.gold_verdict == "NOT_ENOUGH_INFO":
            result["refused"] = ctx.output.refused
        return result


@dataclass
class CitationEvaluator(Evaluator[ClaimInputs, AnswerOutput, ClaimMetadata]):
    """`citation_precision` and `citation_recall` over abstract ids, for claims with gold evidence."""

    def evaluate(self, ctx: EvaluatorContext[ClaimInputs, AnswerOutput, ClaimMetadata]) -> dict[str, float]:
        assert ctx.metadata is not None
        gold = set(ctx.metadata.gold_doc_ids)
        if not gold:
            return {}
        cited = set(ctx.output.cited_doc_ids)
        scores = {"citation_recall": len(cited & gold) / len(gold)}
        if cited:
            scores["citation_precision"] = len(cited & gold) / len(cited)
        return scores


@dataclass
class SupportEvaluator(Evaluator[ClaimInputs, AnswerOutput, ClaimMetadata]):
    """Scores of the support check, for answers it labelled: `sentence_support_rate` (supported / labelled
    sentences), `repeated_sentences` (count), `label_verdict_correct` (the verifier's label of the claim against the
    cited passages equals the gold verdict), and for claims with gold evidence `sentence_citation_precision` /
    `sentence_citation_recall` over the documents of the supported sentences' evidence."""

    def evaluate(self, ctx: EvaluatorContext[ClaimInputs, AnswerOutput, ClaimMetadata]) -> dict[str, float | bool]:
        assert ctx.metadata is not None
        out = ctx.output
        scores: dict[str, float | bool] = {}
        if out.label_verdict is not None and ctx.metadata.gold_verdict is not None:
            scores["label_verdict_correct"] = out.label_verdict == ctx.metadata.gold_verdict
            scores["repeated_sentences"] = float(out.repeated_sentences)
        if out.sentences:
            scores["sentence_support_rate"] = out.supported_sentences / out.sentences
        gold = set(ctx.metadata.gold_doc_ids)
        if gold and out.label_verdict is not None:
            cited = set(out.sentence_cited_doc_ids)
            scores["sentence_citation_recall"] = len(cited & gold) / len(gold)
            if cited:
                scores["sentence_citation_precision"] = len(cited & gold) / len(cited)
        return scores


def _diff(then: list[str], now: list[str]) -> dict[str, list[str]]:
    return {"added": [i for i in now if i not in then], "removed": [i for i in then if i not in now]}


def changed_since_rated(rated: RatedAnswer, output: AnswerOutput) -> dict[str, Any]:
    """What changed between the rated answer and this run's: retrieved and cited chunk ids and cited documents
    (added, removed), the refusal (then, now), and whether anything did (`changed`)."""
    changes: dict[str, Any] = {
        "retrieved_chunk_ids": _diff(rated.retrieved_chunk_ids, output.retrieved_chunk_ids),
        "cited_chunk_ids": _diff(rated.cited_chunk_ids, output.cited_chunk_ids),
        "cited_doc_ids": _diff(rated.cited_doc_ids, output.cited_doc_ids),
        "refused": {"then": rated.refused, "now": output.refused},
    }
    changes["changed"] = rated.refused != output.refused or any(
        v["added"] or v["removed"] for k, v in changes.items() if k != "refused"
    )
    return changes


@dataclass
class RatedAnswerEvaluator(Evaluator[ClaimInputs, AnswerOutput, ClaimMetadata]):
    """For cases from feedback: `same_refusal` (the answer refuses, or not, as the rated one did), `unchanged` (the
    same retrieved and cited ids and refusal), `cited_kept` (share of the rated answer's cited documents cited
    again) for up-votes, and `right_source_cited` / `right_source_retrieved` when the rating names the right
    source."""

    def evaluate(self, ctx: EvaluatorContext[ClaimInputs, AnswerOutput, ClaimMetadata]) -> dict[str, float | bool]:
        assert ctx.metadata is not None
        rated = ctx.metadata.rated
        if rated is None:
            return {}
        out = ctx.output
        scores: dict[str, float | bool] = {
            "same_refusal": rated.refused == out.refused,
            "unchanged": not changed_since_rated(rated, out)["changed"],
        }
        if rated.rating == "up" and rated.cited_doc_ids:
            scores["cited_kept"] = len(set(rated.cited_doc_ids) & set(out.cited_doc_ids)) / len(rated.cited_doc_ids)
        if rated.right_source:
            source = rated.right_source
            scores["right_source_cited"] = source in out.cited_doc_ids or source in out.cited_chunk_ids
            scores["right_source_retrieved"] = source in out.retrieved_chunk_ids or any(
                chunk.split("#")[0].split("::")[-1] == source for chunk in out.retrieved_chunk_ids
            )
        return scores


JOURNAL_FILE = "answered.jsonl"
"""The journal of answered cases in a run directory (`AnswerJournal`); removed once the run is written."""

_CASE_NAME: ContextVar[str | None] = ContextVar("answers_eval_case", default=None)
"""Name of the case being evaluated in this asyncio task (set by `_JournalLifecycle.setup`, read by the task)."""


@dataclass(frozen=True)
class JournalEntry:
    """One answered case as the journal keeps it: its output and how long the task took (s)."""

    inputs: ClaimInputs
    output: AnswerOutput
    task_duration_s: float


class AnswerJournal:
    """Answered cases of one run, appended to a JSON Lines file as each case is scored, so that an interrupted run
    resumes where it stopped.

    The first line records what the answers depend on (`run_key`: LLM, embedder, top_k, policy); each further line
    is one case: `{"name", "inputs", "output", "task_duration_s"}`. Lines are flushed and fsynced as written; a last
    line cut short by a kill is ignored. Only cases whose task succeeded are written (a failed case is asked again).
    """

    def __init__(self, path: Path, run_key: dict[str, Any]) -> None:
        """Open (creating it if needed) the journal at `path` for a run with `run_key`.

        Raises:
            EvalError: the file holds answers of a run with another `run_key` (the message names the differences),
                or a line other than the last is not a journal entry.
        """
        self.path = path
        self.run_key = run_key
        self.entries: dict[str, JournalEntry] = {}
        if path.exists():
            self._load()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._append({"run": run_key})

    def _load(self) -> None:
        text = self.path.read_text()
        lines, complete = text.splitlines(), text.endswith("\n")
        try:
            header = json.loads(lines[0])["run"] if lines else None
        except (ValueError, KeyError, TypeError):
            header = None
        if header is None:
            raise EvalError(f"{self.path}: not an answers journal; delete it or choose another --out")
        if header != self.run_key:
            diff = ", ".join(
                f"{k}={header.get(k)!r} there, {v!r} here" for k, v in self.run_key.items() if header.get(k) != v
            )
            raise EvalError(
                f"{self.path} holds answers of a run with other settings ({diff}); delete it to start over or choose "
                "another --out"
            )
        body = lines[1:] if complete else lines[1:-1]  # a last line without its newline was cut short
        for number, line in enumerate(body, start=2):
            try:
                raw = json.loads(line)
                entry = JournalEntry(
                    ClaimInputs.model_validate(raw["inputs"]),
                    AnswerOutput.model_validate(raw["output"]),
                    float(raw["task_duration_s"]),
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise EvalError(
                    f"{self.path}:{number}: not a journal entry ({exc}); delete the file to start over"
                ) from exc
            self.entries[str(raw["name"])] = entry
        if not complete:
            self.path.write_text("".join(line + "\n" for line in lines[:-1]))

    def _append(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def record(self, name: str, inputs: ClaimInputs, output: AnswerOutput, task_duration_s: float) -> None:
        """Append one answered case (unless the journal has it already)."""
        if name in self.entries:
            return
        self.entries[name] = JournalEntry(inputs, output, task_duration_s)
        self._append(
            {
                "name": name,
                "inputs": inputs.model_dump(),
                "output": output.model_dump(),
                "task_duration_s": round(task_duration_s, 3),
            }
        )

    def answered(self, name: str | None, inputs: ClaimInputs) -> JournalEntry | None:
        """The journal's answer to case `name` when it has one for these same inputs, else None."""
        entry = self.entries.get(name) if name is not None else None
        return entry if entry is not None and entry.inputs == inputs else None


class _JournalLifecycle(CaseLifecycle[ClaimInputs, AnswerOutput, ClaimMetadata]):
    """Names the running case for the task (`_CASE_NAME`) and writes each scored case to `journal`."""

    def __init__(self, case: Case[ClaimInputs, AnswerOutput, ClaimMetadata], journal: AnswerJournal) -> None:
        super().__init__(case)
        self.journal = journal

    async def setup(self) -> None:
        _CASE_NAME.set(self.case.name)

    async def teardown(
        self,
        result: ReportCase[ClaimInputs, AnswerOutput, ClaimMetadata]
        | ReportCaseFailure[ClaimInputs, AnswerOutput, ClaimMetadata]
        | None,
    ) -> None:
        if isinstance(result, ReportCase) and self.case.name is not None:
            self.journal.record(self.case.name, result.inputs, result.output, result.task_duration)


def run_key(settings: Settings, top_k: int | None) -> dict[str, Any]:
    """What a run's answers depend on, compared before a journal is resumed."""
    return {
        "llm_model": settings.llm_model,
        "embedder_model": settings.embedder_model,
        "top_k": top_k or settings.top_k,
        "agent_policy": str(settings.agent_policy),
        "support_check": settings.support_check,
    }


def make_task(app: RagApp, top_k: int | None, journal: AnswerJournal | None = None) -> Any:
    """The evaluated task: ask the agent about one claim and parse its verdict; a case the `journal` has answered
    already returns that answer without asking."""

    async def task(inputs: ClaimInputs) -> AnswerOutput:
        if journal is not None and (entry := journal.answered(_CASE_NAME.get(), inputs)) is not None:
            return entry.output
        # Retrieval (and the refusal threshold calibrated on claims) sees the bare claim; the LLM sees the question.
        # An evaluation is bulk work: its LLM requests are scheduled after questions' (LLM_BULK_PRIORITY).
        question = inputs.question or QUESTION_TEMPLATE.format(claim=inputs.claim)
        query = inputs.retrieval_query if inputs.question else inputs.claim
        result = await app.ask(
            AnswerRequest(
                question, top_k=top_k, retrieval_query=query, model_settings=bulk_model_settings(app.settings)
            )
        )
        refused = result.refused
        verdict: Verdict = "NOT_ENOUGH_INFO" if refused else parse_verdict(result.answer)
        cited = list(dict.fromkeys(c.doc_id for c in result.citations))
        refused = refused or (verdict == "NOT_ENOUGH_INFO" and not cited)
        output = AnswerOutput(
            verdict=verdict,
            answer=result.answer,
            cited_doc_ids=cited,
            refused=refused,
            timings_ms=result.timings_ms,
            truncated=result.truncated,
            cited_chunk_ids=[c.chunk_id for c in result.citations],
            retrieved_chunk_ids=[p.chunk_id for p in result.retrieved],
        )
        return await with_support(output, result, inputs.claim, app)

    return task


async def with_support(output: AnswerOutput, result: AskResult, claim: str, app: RagApp) -> AnswerOutput:
    """`output` with the support check's figures of `result` (unchanged when the check is off): sentences labelled,
    supported, repeated, the sentence-level cited documents, and the verifier's label of `claim` against the
    passages the answer cites (`SupportChecker.verdict`)."""
    report = result.support
    if report is None:
        return output
    checker = app.services.support
    if checker is None:
        return output
    quotes = [s for s in report.sentences if s.quote]
    sentence_docs = [s.evidence.doc_id for s in report.sentences if s.supported and s.evidence is not None]
    cited = [PassageText(c.passage, c.text) for c in result.citations if c.text]
    label, _ = await checker.verdict(claim, cited)
    return output.model_copy(
        update={
            "sentences": report.supported + report.unsupported,
            "supported_sentences": report.supported,
            "repeated_sentences": report.repeated,
            "sentence_cited_doc_ids": list(dict.fromkeys(sentence_docs)),
            "label_verdict": label,
            "extractive": report.extractive or bool(quotes),
            "generated": report.generated,
        }
    )


def percentiles(values: list[float]) -> dict[str, float | int]:
    """p50/p95/p99 and n of `values` (ms) by `tools.stats.percentiles`, rounded to 0.1 ms; empty input gives n=0
    and no percentiles."""
    return {k: v if k == "n" else round(v, 1) for k, v in latency_percentiles(values).items()}


def applicable_scores(metadata: ClaimMetadata) -> tuple[str, ...]:
    """The scores a case with these gold labels gets: `verdict_correct` always; `citation_precision` and
    `citation_recall` for claims with gold evidence; `refused` for claims without (NOT_ENOUGH_INFO)."""
    if metadata.gold_verdict is None:  # a case from feedback: scored on what changed, not a verdict
        return ("citation_precision", "citation_recall") if metadata.gold_doc_ids else ()
    if metadata.gold_verdict == "NOT_ENOUGH_INFO":
        return ("verdict_correct", "refused")
    if metadata.gold_doc_ids:
        return ("verdict_correct", "citation_precision", "citation_recall")
    return ("verdict_correct",)


def summarize(
    report: EvaluationReport[ClaimInputs, AnswerOutput, ClaimMetadata],
    wall_s: float,
    settings: Settings,
    answered_now: int | None = None,
) -> dict[str, Any]:
    """The run summary (`--json` shape): n, verdict_accuracy, majority_baseline, citation precision/recall,
    refusal_rate, errors, truncated (answers cut at `LLM_MAX_TOKENS`, each flagged in its record's output), latency_ms
    per stage {p50, p95, p99, n}, throughput, and what ran.

    A failed case (its task raised, e.g. the LLM answered HTTP 500) scores 0 on every score its gold labels make
    applicable (`applicable_scores`), so every score's denominator counts the failed cases: a failure never raises
    a score. `citation_precision` averages over claims with gold evidence that cited something, plus the failed
    claims with gold evidence. `errors` is the number of failed cases. `throughput_rps` is `answered_now` (default:
    every case) per second of `wall_s`.
    """
    cases = report.cases
    golds = [c.metadata.gold_verdict for c in cases if c.metadata is not None and c.metadata.gold_verdict]
    golds += [f.metadata.gold_verdict for f in report.failures if f.metadata is not None and f.metadata.gold_verdict]
    majority = Counter(golds).most_common(1)[0][1] / len(golds) if golds else None

    def values(name: str) -> list[float]:
        found = [c.assertions.get(name) or c.scores.get(name) for c in cases]
        scored = [float(r.value) for r in found if r is not None]
        failed = [0.0 for f in report.failures if f.metadata is not None and name in applicable_scores(f.metadata)]
        return scored + failed

    def mean(name: str) -> float | None:
        found = values(name)
        return round(float(np.mean(found)), 4) if found else None

    def stage_ms(case: Any, stage: str) -> float | None:
        value = case.output.timings_ms.get(stage)
        if value is None or (stage.startswith("llm") and case.output.refused and value == 0):
            return None  # a refusal without an LLM call has no LLM stage
        return float(value)

    latency = {stage: percentiles([v for c in cases if (v := stage_ms(c, stage)) is not None]) for stage in STAGES}
    n = len(cases) + len(report.failures)
    return {
        "n": n,
        "verdict_accuracy": mean("verdict_correct"),
        "majority_baseline": round(majority, 4) if majority is not None else None,
        "citation_precision": mean("citation_precision"),
        "citation_recall": mean("citation_recall"),
        "refusal_rate": mean("refused"),
        "same_refusal_rate": mean("same_refusal"),
        "unchanged_rate": mean("unchanged"),
        "label_verdict_accuracy": mean("label_verdict_correct"),
        "sentence_support_rate": mean("sentence_support_rate"),
        "sentence_citation_precision": mean("sentence_citation_precision"),
        "sentence_citation_recall": mean("sentence_citation_recall"),
        "repeated_sentences": int(sum(values("repeated_sentences"))),
        "answers_with_repeats": sum(1 for c in cases if c.output.repeated_sentences),
        "extractive_answers": sum(1 for c in cases if c.output.extractive),
        "errors": len(report.failures),
        "truncated": sum(1 for c in cases if c.output.truncated),
        "latency_ms": latency,
        "throughput_rps": round((n if answered_now is None else answered_now) / wall_s, 3) if wall_s > 0 else None,
        "wall_s": round(wall_s, 1),
        "llm_model": settings.llm_model,
        "embedder_model": settings.embedder_model,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


def failed_line(summary: dict[str, Any]) -> str:
    """`k of n cases failed` for the headline of a run."""
    return f"{summary['errors']} of {summary['n']} cases failed"


def case_records(report: EvaluationReport[ClaimInputs, AnswerOutput, ClaimMetadata]) -> list[dict[str, Any]]:
    """Every case as JSON-ready dicts: inputs, gold, output, scores, timings, and errors for failed cases."""
    records: list[dict[str, Any]] = []
    for c in report.cases:
        scores = {k: v.value for k, v in {**c.scores, **c.assertions}.items()}
        record = {
            "name": c.name,
            "inputs": c.inputs.model_dump(),
            "gold": c.metadata.model_dump() if c.metadata else None,
            "output": c.output.model_dump(),
            "scores": scores,
            "task_duration_s": round(c.task_duration, 3),
            "error": None,
        }
        if c.metadata is not None and c.metadata.rated is not None:
            record["changed_since_rated"] = changed_since_rated(c.metadata.rated, c.output)
        records.append(record)
    for f in report.failures:
        records.append(
            {
                "name": f.name,
                "inputs": f.inputs.model_dump(),
                "gold": f.metadata.model_dump() if f.metadata else None,
                "output": None,
                "scores": {},
                "error": f.error_message,
            }
        )
    return records


async def run_answers_eval(
    dataset: AnswerDataset,
    settings: Settings,
    concurrency: int = 1,
    top_k: int | None = None,
    progress: bool = True,
    journal: Path | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Evaluate `dataset` against the running stack; a failing case is recorded and the run goes on.

    Args:
        progress: show pydantic-evals' progress bar (rich, on stdout); off for `--json`.
        journal: the run's journal file (`AnswerJournal`): each answered case is appended to it as it is scored, and
            the cases it holds already are not asked again (their recorded answers are scored). None: no journal.

    Returns:
        (summary, per-case records). With a journal, `summary["resumed"]` counts the cases taken from it, and
        `throughput_rps` counts only the cases answered by this run.

    Raises:
        EvalError: the dataset has no cases, or the journal belongs to a run with other settings.
    """
    if not dataset.cases:
        raise EvalError("the dataset has no cases; nothing to evaluate")
    answers = AnswerJournal(journal, run_key(settings, top_k)) if journal is not None else None
    resumed = {c.name for c in dataset.cases if answers is not None and answers.answered(c.name, c.inputs)}

    def lifecycle(case: Case[ClaimInputs, AnswerOutput, ClaimMetadata]) -> _JournalLifecycle:
        assert answers is not None
        return _JournalLifecycle(case, answers)

    # every case is answered afresh: a cached answer measures neither the model nor the latency
    async with RagApp.from_settings(settings.model_copy(update={"answer_cache": False})) as app:
        start = time.perf_counter()
        report = await dataset.evaluate(
            make_task(app, top_k, answers),
            max_concurrency=concurrency,
            progress=progress,
            lifecycle=lifecycle if answers is not None else None,
        )
        wall_s = time.perf_counter() - start
    if answers is not None:
        for case in report.cases:  # a resumed case's task took no time in this run: keep the recorded duration
            if case.name in resumed:
                case.task_duration = answers.entries[case.name].task_duration_s
    summary = summarize(report, wall_s, settings, answered_now=len(dataset.cases) - len(resumed))
    if answers is not None:
        summary["resumed"] = len(resumed)
    return summary, case_records(report)


def write_run(out_dir: Path, dataset: AnswerDataset, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Write `summary.json`, `results.json`, `cases.yaml`, plots and `report.md` into `out_dir`."""
    from evals.answers_report import write_report

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "results.json").write_text(json.dumps(records, indent=2) + "\n")
    dataset.to_file(out_dir / "cases.yaml")
    write_report(out_dir, summary, records)
