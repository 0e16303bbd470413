"""`rag bench mixed` at CI size on the real stack: questions through the Python API, idle and beside a `rag ingest`
process and a `rag serve` upload job (PDFs printed by Chromium), each bulk run alone and beside them. Answers (the
LLM) are left out here; the figures in docs/benchmarks.md are from a full run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.config.settings import Settings
from evals.bench_mixed import (
    EVAL_RUNS,
    TARGETS,
    MixedBenchParams,
    answer_claims,
    check_targets,
    eval_claim_ids,
    run_mixed_bench,
    write_plot,
)
from evals.scifact import claim_texts


@pytest.mark.stack
@pytest.mark.skipif(not Path("/usr/bin/chromium").is_file(), reason="Debian chromium prints the upload's PDFs")
async def test_ci_size_mixed_run_reports_every_phase(ingested: str, settings: Settings, tmp_path: Path) -> None:
    params = MixedBenchParams(
        workloads=("ingest", "upload"),
        concurrencies=(1, 2),
        retrieval_requests=4,
        answers=False,
        ingest_docs=60,
        upload_files=2,
        upload_pages=2,
        warmup_s=0.0,
    )
    report = await run_mixed_bench(settings, params)
    assert [p["kind"] for p in report["idle"]] == ["retrieval", "retrieval"]
    assert all(p["latency_ms"]["n"] == 4 and not p["errors"] for p in report["idle"])
    assert [ph["workload"] for ph in report["phases"]] == ["ingest", "upload"]
    for phase in report["phases"]:
        for run in (phase["alone"], phase["beside_stream"], phase["beside"]):
            assert run["exit_code"] == 0 and run["done"] > 0 and run["rate"] > 0, run
        assert phase["lost"] == 0
        # the stored rates are rounded to 0.01 units/s (a ratio of those can be off by more than its own rounding):
        # the ratio is of the exact rates, done / wall_s, rounded once to 0.01
        exact = {k: phase[k]["done"] / phase[k]["wall_s"] for k in ("alone", "beside_stream")}
        assert phase["rate_beside_over_alone"] == pytest.approx(exact["beside_stream"] / exact["alone"], abs=0.005)
        assert phase["stream"]["latency_ms"]["n"] >= 1 and not phase["stream"]["errors"]
        for probe in phase["probes"]:
            assert probe["latency_ms"]["n"] == 4 and not probe["errors"]
            assert probe["p50_over_idle"] > 0
    ingest = report["phases"][0]
    # the same chunks, into a fresh database each time
    assert ingest["alone"]["done"] == ingest["beside_stream"]["done"] == ingest["beside"]["done"]
    upload = report["phases"][1]["alone"]["http"]  # the upload's own server, asked over HTTP before and during
    assert upload["idle"]["latency_ms"]["n"] == 20 and not upload["idle"]["errors"]
    assert not upload["during_job"]["errors"]
    assert report["targets"]["failed_questions"] == {"value": 0, "target": "<= 0", "met": True}
    assert report["targets"]["lost_bulk_work"]["met"]
    assert report["work_dir"] is None  # nothing lost: its working folder is gone
    assert set(report["targets"]) <= set(TARGETS)
    assert write_plot(report, tmp_path / "mixed.png").stat().st_size > 0


def test_targets_are_checked_at_concurrency_one_and_skipped_when_not_run() -> None:
    def probe(kind: str, c: int, p50: float, p95: float, **extra: Any) -> dict[str, Any]:
        return {"kind": kind, "concurrency": c, "latency_ms": {"p50": p50, "p95": p95}, "errors": {}, **extra}

    stream: dict[str, Any] = {"errors": {}}
    report = {
        "idle": [probe("retrieval", 1, 40, 60)],
        "phases": [
            {
                "workload": "ingest",
                "probes": [probe("retrieval", 1, 100, 600, p50_over_idle=2.5), probe("retrieval", 8, 900, 9000)],
                "stream": {"errors": {"EmbedderError": 1}},
                "rate_beside_over_alone": 0.79,
                "lost": 0,
            },
            {"workload": "upload", "probes": [], "stream": stream, "rate_beside_over_alone": 1.0, "lost": 1},
        ],
    }
    targets = check_targets(report)
    assert targets["retrieval_p50_over_idle_during_ingest"] == {"value": 2.5, "target": "<= 3", "met": True}
    assert not targets["retrieval_p95_ms_during_ingest"]["met"]  # 600 ms at c=1; c=8 is not a target
    assert not targets["ingest_rate_beside_over_alone"]["met"]
    assert targets["failed_questions"]["value"] == 1 and targets["lost_bulk_work"]["value"] == 1
    assert "ttft_p50_over_idle_during_eval" not in targets  # no eval phase, no answers: not judged


def test_a_probe_that_outlived_its_workload_does_not_meet_its_target() -> None:
    answer = {"kind": "answer", "concurrency": 1, "latency_ms": {"p50": 900}, "errors": {}, "ttft_p50_over_idle": 1.1}
    report = {
        "idle": [],
        "phases": [
            {"workload": "eval", "probes": [{**answer, "overlap": False}], "stream": {"errors": {}}, "lost": 0},
            {"workload": "ingest", "probes": [{**answer, "overlap": True}], "stream": {"errors": {}}, "lost": 0},
        ],
    }
    targets = check_targets(report)
    assert targets["ttft_p50_over_idle_during_eval"] == {
        "value": 1.1,
        "target": "<= 2",
        "met": False,
        "overlap": False,
    }
    assert targets["ttft_p50_over_idle_during_ingest"] == {"value": 1.1, "target": "<= 1.5", "met": True}


def test_params_refuse_unknown_workloads_and_empty_counts() -> None:
    with pytest.raises(ValueError, match="--workload"):
        MixedBenchParams(workloads=("nightly",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 1"):
        MixedBenchParams(upload_files=0)


def test_each_eval_run_answers_its_own_slice_of_test_claims() -> None:
    # a run never reuses the claims (and so the vLLM prefix cache) of the run before it
    runs = [eval_claim_ids(80, k) for k in range(len(EVAL_RUNS))]
    assert [len(r) for r in runs] == [80, 80, 80]
    assert len({claim for r in runs for claim in r}) == 240
    test_ids = list(claim_texts("test"))
    assert runs[0] == test_ids[:80] and runs[2] == test_ids[160:240]
    wrapped = eval_claim_ids(200, 1)  # past the 300 test claims it wraps round to the first
    assert wrapped[:100] == test_ids[200:] and wrapped[100:] == test_ids[:100]
    with pytest.raises(ValueError, match="cases 0"):
        eval_claim_ids(0, 0)


def test_answer_probes_ask_train_claims_in_a_seeded_order() -> None:
    # a claim asked before is served from vLLM's prefix cache: answer probes never share claims with the test split
    # (retrieval probes, the eval workload) and another seed asks others first
    first, again, other = answer_claims(1), answer_claims(1), answer_claims(2)
    assert first == again and first != other and sorted(first) == sorted(other)
    assert len(first) == len(set(first)) == 805  # 809 train claims: two asked twice, two also test claims
    assert not set(first) & set(claim_texts("test").values())
