"""The answer eval's scoring pieces on hand-made cases: verdict parsing, latency percentiles, citation scores, gold
verdicts from SciFact's evidence labels. Pure logic, no server."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from evals.answers_eval import (
    AnswerOutput,
    CitationEvaluator,
    ClaimInputs,
    ClaimMetadata,
    parse_verdict,
    percentiles,
    scifact_dataset,
)


def test_parse_verdict_reads_the_first_verdict_word() -> None:
    assert parse_verdict("SUPPORT. The passages [1] show it.") == "SUPPORT"
    assert parse_verdict("The study contradicts this [2], it does not support it.") == "CONTRADICT"
    assert parse_verdict("NOT ENOUGH INFO: nothing relevant") == "NOT_ENOUGH_INFO"
    assert parse_verdict("The documents do not cover it.") == "NOT_ENOUGH_INFO"
    assert parse_verdict("Cats are mammals.") == "NOT_ENOUGH_INFO"


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
