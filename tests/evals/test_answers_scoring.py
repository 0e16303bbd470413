"""The answer eval's scoring pieces on hand-made cases: verdict parsing, latency percentiles, citation scores, gold
verdicts from SciFact's evidence labels. Pure logic, no server."""

from __future__ import annotations

from collections import Counter
from typing import cast

import numpy as np
import pytest

from agent.config.settings import Settings
from agent.core.app import RagApp
from agent.core.results import AskResult
from evals.answers_eval import (
    AnswerOutput,
    CitationEvaluator,
    ClaimInputs,
    ClaimMetadata,
    make_task,
    parse_verdict,
    percentiles,
    scifact_dataset,
)

VERDICT_PHRASINGS: list[tuple[str, str]] = [
    ("SUPPORT. The passages [1] show it.", "SUPPORT"),
    ("Support. The documents show [1]", "SUPPORT"),
    ("Supported: [1] shows a rise.", "SUPPORT"),
    ("The passages support the claim [1].", "SUPPORT"),
    ("Yes, passage [1] confirms this.", "SUPPORT"),
    ("The data are consistent with the claim [2].", "SUPPORT"),
    ("The passages may support the claim [1].", "SUPPORT"),  # hedge: still the stated lean
    ("Passage [1] partially supports the claim.", "SUPPORT"),
    ("CONTRADICT. Passage [2] reports the opposite.", "CONTRADICT"),
    ("The study contradicts this [2], it does not support it.", "CONTRADICT"),
    ("No, the passages contradict it [1].", "CONTRADICT"),
    ("The passages refute the claim [1].", "CONTRADICT"),
    ("Study [3] disproves this.", "CONTRADICT"),
    ("The claim is false according to [1].", "CONTRADICT"),
    ("The findings are inconsistent with the claim [2].", "CONTRADICT"),
    ("Contrary to the claim, B12 lowers it [1].", "CONTRADICT"),
    ("NOT ENOUGH INFO: nothing relevant", "NOT_ENOUGH_INFO"),
    ("The documents do not support this claim.", "NOT_ENOUGH_INFO"),
    ("The passages don't support the claim [1].", "NOT_ENOUGH_INFO"),
    ("The passages do not clearly support the claim.", "NOT_ENOUGH_INFO"),
    ("The claim is unsupported by the passages.", "NOT_ENOUGH_INFO"),
    ("There is no evidence to support it.", "NOT_ENOUGH_INFO"),
    ("There is no support for the claim in the documents.", "NOT_ENOUGH_INFO"),
    ("The documents have no direct evidence on this.", "NOT_ENOUGH_INFO"),
    ("The evidence neither supports nor contradicts the claim.", "NOT_ENOUGH_INFO"),
    ("The claim is not contradicted by the passages.", "NOT_ENOUGH_INFO"),
    ("The passages fail to confirm it.", "NOT_ENOUGH_INFO"),
    ("There is not enough information to decide.", "NOT_ENOUGH_INFO"),
    ("I don't have enough information to answer.", "NOT_ENOUGH_INFO"),
    ("It is unclear whether the passages support the claim.", "NOT_ENOUGH_INFO"),
    ("Evidence is insufficient.", "NOT_ENOUGH_INFO"),
    ("The results are inconclusive.", "NOT_ENOUGH_INFO"),
    ("The documents do not cover it.", "NOT_ENOUGH_INFO"),
    ("The passages do not mention this.", "NOT_ENOUGH_INFO"),
    ("Cats are mammals.", "NOT_ENOUGH_INFO"),
]


@pytest.mark.parametrize(("answer", "verdict"), VERDICT_PHRASINGS)
def test_parse_verdict_reads_the_stated_verdict_negations_included(answer: str, verdict: str) -> None:
    assert parse_verdict(answer) == verdict


def test_percentiles_follow_numpy_linear_and_never_exceed_the_max() -> None:
    assert percentiles([42.0]) == {"p50": 42.0, "p95": 42.0, "p99": 42.0, "n": 1}
    values = [float(v) for v in range(1, 101)]
    p = percentiles(values)
    assert p["p50"] == pytest.approx(float(np.percentile(values, 50)))
    assert p["p95"] == pytest.approx(95.05, abs=0.051) and p["p99"] <= max(values) and p["n"] == 100
    assert percentiles([]) == {"n": 0}


def test_citation_scores_on_hand_computed_cases() -> None:
    from pydantic_evals.evaluators import EvaluatorContext
    from pydantic_evals.otel._errors import SpanTreeRecordingError

    def ctx(cited: list[str], gold: list[str]) -> EvaluatorContext[ClaimInputs, AnswerOutput, ClaimMetadata]:
        output = AnswerOutput(verdict="SUPPORT", answer="", cited_doc_ids=cited, refused=False, timings_ms={})
        meta = ClaimMetadata(gold_verdict="SUPPORT" if gold else "NOT_ENOUGH_INFO", gold_doc_ids=gold)
        return EvaluatorContext(
            name="c",
            inputs=ClaimInputs(claim="x"),
            metadata=meta,
            expected_output=None,
            output=output,
            duration=0.0,
            _span_tree=SpanTreeRecordingError("not recorded"),
            attributes={},
            metrics={},
        )

    evaluator = CitationEvaluator()
    assert evaluator.evaluate(ctx(["a", "b", "c"], ["a", "d"])) == {"citation_precision": 1 / 3, "citation_recall": 0.5}
    assert evaluator.evaluate(ctx([], ["a"])) == {"citation_recall": 0.0}
    assert evaluator.evaluate(ctx(["a"], [])) == {}


def test_scifact_gold_verdicts_come_from_evidence_labels() -> None:
    dataset = scifact_dataset("test")
    assert len(dataset.cases) == 300
    verdicts = Counter(c.metadata.gold_verdict for c in dataset.cases if c.metadata)
    assert verdicts == {"SUPPORT": 124, "NOT_ENOUGH_INFO": 112, "CONTRADICT": 64}
    by_id = {c.name: c.metadata for c in dataset.cases}
    assert by_id["70"] == ClaimMetadata(gold_verdict="SUPPORT", gold_doc_ids=["4414547", "5956380"])
    assert by_id["51"] == ClaimMetadata(gold_verdict="CONTRADICT", gold_doc_ids=["45638119"])
    assert by_id["36"] == ClaimMetadata(gold_verdict="NOT_ENOUGH_INFO", gold_doc_ids=[])  # cited, but no evidence


class CutAnswers:
    """The part of `RagApp` the eval's task uses: its settings, and every answer stopped at the output budget."""

    settings = Settings.model_validate({})

    async def ask(self, request: object) -> AskResult:
        return AskResult(answer="SUPPORT. The passages show", citations=[], timings_ms={"total": 1.0}, truncated=True)


async def test_a_truncated_answer_is_recorded_as_truncated() -> None:
    task = make_task(cast(RagApp, CutAnswers()), top_k=None)
    output = await task(ClaimInputs(claim="B12 deficiency raises homocysteine."))
    assert output.truncated is True and output.model_dump()["truncated"] is True
    older = {k: v for k, v in output.model_dump().items() if k != "truncated"}  # a journal of an earlier run
    assert AnswerOutput.model_validate(older).truncated is False
