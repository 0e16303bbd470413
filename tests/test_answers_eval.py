"""The answer-eval harness: a CI-size run through the real stack, and its scoring pieces on hand-made cases."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from agent.settings import Settings
from evals.answers_eval import (
    AnswerOutput,
    CitationEvaluator,
    ClaimInputs,
    ClaimMetadata,
    load_cases,
    parse_verdict,
    percentiles,
    scifact_dataset,
)
from tests.conftest import GOLD_CLAIMS, run_cli
from tools.store import VectorStore


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


@pytest.mark.llm
async def test_ci_size_answer_run_writes_a_sane_report(
    llm_settings: Settings, store: VectorStore, tmp_path: Path
) -> None:
    ids = sorted(GOLD_CLAIMS)[:3]
    out = tmp_path / "run"
    args = ["eval", "answers", "--out", str(out), "--json", "--top-k", "3", "--concurrency", "2"]
    result = run_cli(llm_settings, *args, *(arg for i in ids for arg in ("--id", i)))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["n"] == 3 and summary["errors"] == 0
    golds = [c.metadata.gold_verdict for c in scifact_dataset("test", ids=ids).cases if c.metadata]
    assert summary["majority_baseline"] == pytest.approx(round(Counter(golds).most_common(1)[0][1] / 3, 4))
    for key in ("verdict_accuracy", "citation_recall"):
        assert 0.0 <= summary[key] <= 1.0
    records = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in records] == ids or sorted(r["name"] for r in records) == ids
    for stage in ("embed", "search", "llm", "total"):
        p = summary["latency_ms"][stage]
        observed = [r["output"]["timings_ms"][stage] for r in records]
        assert p["n"] == 3
        assert min(observed) <= p["p50"] <= p["p95"] <= p["p99"] <= max(observed) + 0.1
    for name in ("report.md", "latency_cdf.png", "scores.png", "cases.yaml"):
        assert (out / name).stat().st_size > 0
    assert len(load_cases(out / "cases.yaml").cases) == 3

    same = run_cli(llm_settings, "eval", "compare", str(out), str(out), "--json")
    assert same.returncode == 0, same.stderr
    deltas = json.loads(same.stdout)
    assert deltas["verdict_accuracy"]["delta"] == 0


async def test_empty_dataset_is_a_clear_error(ingested: str, settings: Settings, tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("name: empty\ncases: []\n")
    result = run_cli(settings, "eval", "answers", "--cases", str(empty), "--out", str(tmp_path / "o"))
    assert result.returncode == 1
    assert "no cases" in result.stderr and "Traceback" not in result.stderr
