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
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field
from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import Evaluator, EvaluatorContext
from pydantic_evals.reporting import EvaluationReport

from agent.app import RagApp
from agent.settings import Settings
from evals.scifact import SCIFACT_DIR, Split, load_queries

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
    """A case's input: the claim text."""

    claim: str


class ClaimMetadata(BaseModel):
    """Gold labels of a claim: its verdict and the abstracts holding its evidence."""

    gold_verdict: Verdict
    gold_doc_ids: list[str] = Field(default_factory=list)


class AnswerOutput(BaseModel):
    """What the task returns for one claim."""

    verdict: Verdict
    answer: str
    cited_doc_ids: list[str]
    refused: bool
    timings_ms: dict[str, float]


AnswerDataset = Dataset[ClaimInputs, AnswerOutput, ClaimMetadata]


def parse_verdict(answer: str) -> Verdict:
    """The first verdict word in `answer` ('support(s/ed)', 'contradict(s/ed)', 'not enough info'); default
    NOT_ENOUGH_INFO when none appears."""
    match = re.search(r"not enough info|insufficient|do(?:es)? not cover|contradict|refute|support", answer, re.I)
    if match is None:
        return "NOT_ENOUGH_INFO"
    word = match.group(0).lower()
    if word.startswith(("contradict", "refute")):
        return "CONTRADICT"
    if word.startswith("support"):
        return "SUPPORT"
    return "NOT_ENOUGH_INFO"


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
    return AnswerDataset(name=f"scifact-{split}", cases=cases, evaluators=[VerdictEvaluator(), CitationEvaluator()])


def load_cases(path: Path) -> AnswerDataset:
    """Cases from a YAML or JSON file in pydantic-evals' dataset format (see `cases.yaml` written by a run).

    Raises:
        EvalError: the file is missing or does not match the schema.
    """
    if not path.is_file():
        raise EvalError(f"cases file {path}: no such file")
    try:
        dataset = AnswerDataset.from_file(path, custom_evaluator_types=[VerdictEvaluator, CitationEvaluator])
    except ValueError as exc:
        raise EvalError(f"cases file {path}: {exc}") from exc
    if not dataset.evaluators:
        dataset.evaluators = [VerdictEvaluator(), CitationEvaluator()]
    return dataset


@dataclass
class VerdictEvaluator(Evaluator[ClaimInputs, AnswerOutput, ClaimMetadata]):
    """`verdict_correct` (bool) for every case; `refused` (bool) for claims without evidence."""

    def evaluate(self, ctx: EvaluatorContext[ClaimInputs, AnswerOutput, ClaimMetadata]) -> dict[str, bool]:
        assert ctx.metadata is not None
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


def make_task(app: RagApp, top_k: int | None) -> Any:
    """The evaluated task: ask the agent about one claim and parse its verdict."""

    async def task(inputs: ClaimInputs) -> AnswerOutput:
        # Retrieval (and the refusal threshold calibrated on claims) sees the bare claim; the LLM sees the question.
        result = await app.ask(QUESTION_TEMPLATE.format(claim=inputs.claim), top_k, retrieval_query=inputs.claim)
        refused = result.refused
        verdict: Verdict = "NOT_ENOUGH_INFO" if refused else parse_verdict(result.answer)
        cited = list(dict.fromkeys(c.doc_id for c in result.citations))
        refused = refused or (verdict == "NOT_ENOUGH_INFO" and not cited)
        return AnswerOutput(
            verdict=verdict, answer=result.answer, cited_doc_ids=cited, refused=refused, timings_ms=result.timings_ms
        )

    return task


def percentiles(values: list[float]) -> dict[str, float | int]:
    """p50/p95/p99 (numpy, method="linear") and n of `values` (ms); empty input gives n=0 and no percentiles."""
    if not values:
        return {"n": 0}
    p50, p95, p99 = np.percentile(np.asarray(values, dtype=np.float64), [50, 95, 99], method="linear")
    return {"p50": round(float(p50), 1), "p95": round(float(p95), 1), "p99": round(float(p99), 1), "n": len(values)}


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def summarize(
    report: EvaluationReport[ClaimInputs, AnswerOutput, ClaimMetadata], wall_s: float, settings: Settings
) -> dict[str, Any]:
    """The run summary (`--json` shape): n, verdict_accuracy, majority_baseline, citation precision/recall,
    refusal_rate, errors, latency_ms per stage {p50, p95, p99, n}, throughput, and what ran."""
    cases = report.cases
    golds = [c.metadata.gold_verdict for c in cases if c.metadata is not None]
    golds += [f.metadata.gold_verdict for f in report.failures if f.metadata is not None]
    majority = Counter(golds).most_common(1)[0][1] / len(golds) if golds else None

    def values(name: str) -> list[float]:
        found = [c.assertions.get(name) or c.scores.get(name) for c in cases]
        return [float(r.value) for r in found if r is not None]

    verdicts = values("verdict_correct")

    def stage_ms(case: Any, stage: str) -> float | None:
        value = case.output.timings_ms.get(stage)
        if value is None or (stage.startswith("llm") and case.output.refused and value == 0):
            return None  # a refusal without an LLM call has no LLM stage
        return float(value)

    latency = {stage: percentiles([v for c in cases if (v := stage_ms(c, stage)) is not None]) for stage in STAGES}
    n = len(cases) + len(report.failures)
    return {
        "n": n,
        "verdict_accuracy": round(sum(verdicts) / n, 4) if n else None,
        "majority_baseline": round(majority, 4) if majority is not None else None,
        "citation_precision": _mean(values("citation_precision")),
        "citation_recall": _mean(values("citation_recall")),
        "refusal_rate": _mean(values("refused")),
        "errors": len(report.failures),
        "latency_ms": latency,
        "throughput_rps": round(n / wall_s, 3) if wall_s > 0 else None,
        "wall_s": round(wall_s, 1),
        "llm_model": settings.llm_model,
        "embedder_model": settings.embedder_model,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


def case_records(report: EvaluationReport[ClaimInputs, AnswerOutput, ClaimMetadata]) -> list[dict[str, Any]]:
    """Every case as JSON-ready dicts: inputs, gold, output, scores, timings, and errors for failed cases."""
    records: list[dict[str, Any]] = []
    for c in report.cases:
        scores = {k: v.value for k, v in {**c.scores, **c.assertions}.items()}
        records.append(
            {
                "name": c.name,
                "inputs": c.inputs.model_dump(),
                "gold": c.metadata.model_dump() if c.metadata else None,
                "output": c.output.model_dump(),
                "scores": scores,
                "task_duration_s": round(c.task_duration, 3),
                "error": None,
            }
        )
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
    dataset: AnswerDataset, settings: Settings, concurrency: int = 1, top_k: int | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Evaluate `dataset` against the running stack; a failing case is recorded and the run goes on.

    Returns:
        (summary, per-case records).

    Raises:
        EvalError: the dataset has no cases.
    """
    if not dataset.cases:
        raise EvalError("the dataset has no cases; nothing to evaluate")
    async with RagApp.from_settings(settings) as app:
        start = time.perf_counter()
        report = await dataset.evaluate(make_task(app, top_k), max_concurrency=concurrency, progress=True)
        wall_s = time.perf_counter() - start
    return summarize(report, wall_s, settings), case_records(report)


def write_run(out_dir: Path, dataset: AnswerDataset, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Write `summary.json`, `results.json`, `cases.yaml`, plots and `report.md` into `out_dir`."""
    from evals.answers_report import write_report

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "results.json").write_text(json.dumps(records, indent=2) + "\n")
    dataset.to_file(out_dir / "cases.yaml")
    write_report(out_dir, summary, records)
