"""The answer-eval harness: a CI-size run through the real stack (its scoring pieces: test_answers_scoring.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from agent.config.settings import Settings
from evals.answers_eval import load_cases, run_answers_eval, scifact_dataset
from tests.conftest import GOLD_CLAIMS, cli_env, run_cli
from tests.fake_openai import FakeOpenAIServer, Reply
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
    summary = json.loads(result.stdout)
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


CITE_ALL = "SUPPORT. The passages show it " + ", ".join(f"[{n}]" for n in range(1, 11)) + "."


def fake_llm_settings(settings: Settings, fake: FakeOpenAIServer) -> Settings:
    """The test stack with the fake LLM, no retries, and refusal off (every case reaches the LLM, in order)."""
    update = {"llm_base_url": fake.base_url, "llm_model": "fake", "llm_max_retries": 0, "refusal_min_score": -1.0}
    update["vllm_port"] = fake.port  # the settings check that a local LLM_BASE_URL names VLLM_PORT
    return settings.model_copy(update=update)


async def test_a_failed_case_scores_zero_in_every_denominator(ingested: str, settings: Settings) -> None:
    dataset = scifact_dataset("test", ids=["3", "5", "36"])  # two claims with evidence, one without
    with FakeOpenAIServer() as fake:
        # Concurrency 1, in order: claim 3 gets HTTP 500; claim 5 an answer citing all 10 passages (its gold abstract
        # is among them: recall 1); claim 36 (no gold evidence) a SUPPORT answer, neither refused nor correct.
        requests = fake.reset(Reply(status=500), Reply(text=CITE_ALL), Reply(text="SUPPORT [1]."))
        summary, records = await run_answers_eval(dataset, fake_llm_settings(settings, fake), 1, 10, progress=False)
    assert len(requests) == 3
    # An evaluation is bulk work: every LLM request carries LLM_BULK_PRIORITY (questions send none).
    assert [r.get("priority") for r in requests] == [settings.llm_bulk_priority] * 3 and settings.llm_bulk_priority
    by_name = {r["name"]: r for r in records}
    assert by_name["3"]["error"] and "500" in by_name["3"]["error"] and by_name["5"]["error"] is None
    assert by_name["5"]["scores"]["citation_recall"] == 1.0 and by_name["5"]["scores"]["verdict_correct"] is True
    assert summary["n"] == 3 and summary["errors"] == 1
    # The failed claim 3 scores 0: recall 0.5, not claim 5's 1.0 alone.
    assert summary["citation_recall"] == 0.5
    assert summary["citation_precision"] == pytest.approx(round(by_name["5"]["scores"]["citation_precision"] / 2, 4))
    assert summary["verdict_accuracy"] == pytest.approx(round(1 / 3, 4))
    assert summary["refusal_rate"] == 0.0


def test_cli_json_is_the_only_stdout_and_failed_cases_exit_non_zero(
    ingested: str, settings: Settings, tmp_path: Path
) -> None:
    with FakeOpenAIServer() as fake:
        fake.reset(Reply(text="SUPPORT [1]."), Reply(status=500))
        env = cli_env(fake_llm_settings(settings, fake))
        env |= {"LLM_MODEL": "fake", "LLM_MAX_RETRIES": "0", "REFUSAL_MIN_SCORE": "-1"}
        args = ["eval", "answers", "--id", "3", "--id", "5", "--top-k", "3", "--json", "--out", str(tmp_path / "r")]
        result = subprocess.run(
            [sys.executable, "-m", "agent", *args], env=env, capture_output=True, text=True, timeout=600
        )
    assert result.returncode == 2, result.stdout + result.stderr
    summary = json.loads(result.stdout)  # the whole of stdout: no progress bar, no other line
    assert summary["n"] == 2 and summary["errors"] == 1
    assert "1 of 2 cases failed" in result.stderr
    assert "1 of 2 cases failed" in (tmp_path / "r" / "report.md").read_text()


def journal_entries(path: Path) -> int:
    """Entries written to an answers journal so far (its first line is the run's header)."""
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


def test_interrupted_answer_run_keeps_its_answers_and_the_rerun_asks_only_the_rest(
    ingested: str, settings: Settings, tmp_path: Path
) -> None:
    ids = ["1", "3", "5", "13", "36", "42"]
    out = tmp_path / "run"
    journal = out / "answered.jsonl"
    args = ["eval", "answers", *(a for i in ids for a in ("--id", i)), "--top-k", "3", "--json", "--out", str(out)]
    answers = [Reply(text="SUPPORT [1]."), Reply(text="CONTRADICT [1]."), Reply(text="NOT ENOUGH INFO.")]
    verdicts = ["SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO"]
    with FakeOpenAIServer() as fake:
        env = cli_env(fake_llm_settings(settings, fake))
        env |= {"LLM_MODEL": "fake", "LLM_MAX_RETRIES": "0", "REFUSAL_MIN_SCORE": "-1"}
        # Concurrency 1, in order: three cases answered, the fourth request is held (answered only after an hour), and
        # the run is interrupted (SIGINT) while it waits for it.
        requests = fake.reset(*answers, Reply(text="SUPPORT [1].", delay_s=3600))
        run = subprocess.Popen(
            [sys.executable, "-m", "agent", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            # The interrupt point: the fourth case asked and the first three in the journal (a case is written once
            # it is scored, which may come after the next case's request). The deadline is a safety net.
            deadline = time.monotonic() + 600
            while len(requests) < 4 or journal_entries(journal) < 3:
                assert run.poll() is None, run.communicate()
                assert time.monotonic() < deadline, "the fourth case was not asked within 600 s"
                time.sleep(0.05)
            run.send_signal(signal.SIGINT)
            _, stderr = run.communicate(timeout=600)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
        assert run.returncode == 130, stderr
        assert "3 of 6 cases answered are kept" in stderr and "run the same command again" in stderr, stderr
        kept = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
        assert [k["name"] for k in kept] == ids[:3]
        assert [k["output"]["verdict"] for k in kept] == verdicts

        # The same command again: only the three cases the journal lacks reach the LLM.
        requests = fake.reset(*answers)
        result = subprocess.run(
            [sys.executable, "-m", "agent", *args], env=env, capture_output=True, text=True, timeout=600
        )
        fake.server.force_exit = True  # the held request of the interrupted run is not waited for
    assert result.returncode == 0, result.stderr
    assert len(requests) == 3
    summary = json.loads(result.stdout)
    assert summary["n"] == 6 and summary["errors"] == 0 and summary["resumed"] == 3
    records = {r["name"]: r for r in json.loads((out / "results.json").read_text())}
    assert sorted(records) == sorted(ids)
    for k in kept:
        assert records[k["name"]]["output"] == k["output"]
    assert [records[i]["output"]["verdict"] for i in ids[3:]] == verdicts
    assert not journal.exists()  # the run is written: a new run starts afresh
