"""From feedback to a regression test against the real stack (Postgres, Triton; a fake LLM): answers rated through
the Python API are stored in Postgres with their corpus version, scoped to the key that asked, exported with
`rag eval export-feedback`, and the export runs in `rag eval retrieval --dataset` and `rag eval answers --cases`
(which reports what changed since each rated answer). Without servers: test_feedback_http.py,
tests/agent/core/test_feedback.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from agent.core.feedback import AnswerNotFoundError
from evals.scifact import load_queries
from tests.conftest import GOLD_CLAIMS, run_cli
from tests.fake_openai import FakeOpenAIServer, Reply


def fake_llm_settings(settings: Settings, fake: FakeOpenAIServer) -> Settings:
    """The test stack with the fake LLM, no retries, no refusal, no support check, no answer cache."""
    update = {"llm_base_url": fake.base_url, "llm_model": "fake", "llm_max_retries": 0, "refusal_min_score": -1.0}
    update |= {"vllm_port": fake.port, "support_check": "off", "answer_cache": False}
    return settings.model_copy(update=update)


FAKE_ENV = {"LLM_MODEL": "fake", "LLM_MAX_RETRIES": "0", "REFUSAL_MIN_SCORE": "-1", "SUPPORT_CHECK": "off"}


async def test_rated_answers_become_a_retrieval_set_and_answer_cases(
    ingested: str, settings: Settings, tmp_path: Path
) -> None:
    claims = {q.query_id: q.text for q in load_queries("test")}
    since = datetime.now(UTC).isoformat()
    with FakeOpenAIServer() as fake:
        fake.reset()  # every request: the default reply
        fake.state.default = Reply(text="SUPPORT, as the passages show [1].")
        stack = fake_llm_settings(settings, fake)
        async with RagApp(stack) as rag:
            good = await rag.ask(AnswerRequest(claims["3"], top_k=3, owner="1"))
            wrong = await rag.ask(AnswerRequest(claims["5"], top_k=3, owner="2"))
            # tenants: a key never rates nor reads another key's answer; the admin (None) sees both
            with pytest.raises(AnswerNotFoundError):
                await rag.rate(wrong.answer_id, "up", owner="1")
            up = await rag.rate(good.answer_id, "up", comment="right abstract", owner="1")
            down = await rag.rate(
                wrong.answer_id, "down", comment="<b>not</b> this one", right_source=GOLD_CLAIMS["5"], owner="2"
            )
            assert [r.answer_id for r in await rag.feedback.find(owner="2")] == [wrong.answer_id]
            assert {r.answer_id for r in await rag.feedback.find()} >= {good.answer_id, wrong.answer_id}
            assert up.record.corpus_version and all(v > 0 for v in up.record.corpus_version.values())
            assert down.comment == "<b>not</b> this one" and down.record.retrieved
        listed = run_cli(stack, "feedback", "list", "--json", "--since", since, extra_env=FAKE_ENV)
        assert listed.returncode == 0, listed.stderr
        assert {f["answer_id"] for f in json.loads(listed.stdout)["feedback"]} == {good.answer_id, wrong.answer_id}
        counts = run_cli(stack, "feedback", "counts", "--json", extra_env=FAKE_ENV)
        assert counts.returncode == 0 and json.loads(counts.stdout)["totals"]["total"] >= 2, counts.stderr

        out = tmp_path / "from-feedback"
        exported = run_cli(stack, "eval", "export-feedback", str(out), "--since", since, "--json", extra_env=FAKE_ENV)
        assert exported.returncode == 0, exported.stderr
        summary = json.loads(exported.stdout)
        assert (summary["ratings"], summary["judged_queries"], summary["missing_documents"]) == (2, 2, [])
        qrels = (out / "qrels" / "test.tsv").read_text()
        assert f"{wrong.answer_id}\t{GOLD_CLAIMS['5']}\t2" in qrels
        assert "owner" not in (out / "cases.yaml").read_text()

        retrieval = run_cli(stack, "eval", "retrieval", "--dataset", str(out), "--json", extra_env=FAKE_ENV)
        assert retrieval.returncode == 0, retrieval.stderr

        run = tmp_path / "run"
        args = ["eval", "answers", "--cases", str(out / "cases.yaml"), "--top-k", "3", "--json", "--out", str(run)]
        answers = run_cli(stack, *args, extra_env=FAKE_ENV)
    assert answers.returncode == 0, answers.stdout + answers.stderr
    assert json.loads(answers.stdout)["n"] == 2
    records = {r["name"]: r for r in json.loads((run / "results.json").read_text())}
    assert set(records) == {good.answer_id, wrong.answer_id}
    for record in records.values():
        assert set(record["changed_since_rated"]) >= {"retrieved_chunk_ids", "cited_chunk_ids", "refused", "changed"}
    assert records[good.answer_id]["scores"]["same_refusal"] is True
    assert "What changed since the rated answers" in (run / "report.md").read_text()
