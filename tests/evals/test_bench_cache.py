"""`rag bench cache`'s question log and figures (the run itself needs Postgres and Triton: `rag bench cache`)."""

from __future__ import annotations

import pytest

from evals.bench_cache import CacheBenchParams, question_log, summarize


def test_the_question_log_is_seeded_and_draws_repeats_from_the_chosen_claims() -> None:
    params = CacheBenchParams(claims=10, questions=50, seed=3)
    docs, log = question_log(params)
    assert (docs, log) == question_log(params)
    assert len(log) == 50 and len(set(log)) <= 10 and len(docs) >= 1
    assert question_log(CacheBenchParams(claims=10, questions=50, seed=4))[1] != log


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="claims=0"):
        CacheBenchParams(claims=0)
    with pytest.raises(ValueError, match="SciFact"):
        question_log(CacheBenchParams(claims=100_000))


def test_summary_splits_hits_from_misses_and_checks_the_target() -> None:
    samples = [(0.050, False), (0.002, True), (0.004, True), (0.060, False)]
    report = summarize(samples, distinct=2)
    assert report["hits"] == 2 and report["hit_rate"] == 0.5 and report["most_hit_rate"] == 0.5
    assert report["hit_latency_ms"]["n"] == 2 and report["miss_latency_ms"]["p50"] == 55.0
    assert report["targets"]["hit_p50_ms"] == {"value": 3.0, "target": "<= 20"}
