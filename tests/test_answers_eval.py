"""The answer-eval harness: a CI-size run through the real stack (its scoring pieces: test_answers_scoring.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agent.settings import Settings
from evals.answers_eval import load_cases, scifact_dataset
from tests.conftest import GOLD_CLAIMS, run_cli
from tools.store import VectorStore


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
