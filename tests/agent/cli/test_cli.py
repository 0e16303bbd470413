"""The `rag` CLI end to end against the real stack (Postgres, Triton, vLLM)."""

from __future__ import annotations

import json
import socket

import pytest

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from infra import processes, triton
from infra.config import StackConfig
from infra.processes import free_port
from tests.conftest import run_cli
from tools.store import VectorStore

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."


@pytest.mark.llm
async def test_ask_json_citations_belong_to_chunks_retrieved_for_it(llm_settings: Settings, store: VectorStore) -> None:
    result = run_cli(llm_settings, "ask", "--json", "--top-k", "4", CLAIM)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert set(payload) >= {"answer", "citations", "timings_ms"}
    assert isinstance(payload["answer"], str) and payload["answer"].strip()
    assert set(payload["timings_ms"]) >= {"embed", "search", "llm", "total"}
    assert payload["timings_ms"]["llm"] > 0
    assert payload["timings_ms"]["total"] >= payload["timings_ms"]["llm"]
    async with RagApp.from_settings(llm_settings) as app:
        retrieved = {p.chunk_id: p for p in (await app.search(CLAIM, top_k=4)).passages}
    for citation in payload["citations"]:
        assert citation["chunk_id"] in retrieved
        assert citation["doc_id"] == retrieved[citation["chunk_id"]].doc_id
        assert {"doc_id", "chunk_id", "score"} <= set(citation)


@pytest.mark.llm
async def test_python_api_answers_concurrent_questions(llm_settings: Settings, store: VectorStore) -> None:
    import asyncio

    questions = [CLAIM, "ALDH1 expression is associated with poorer prognosis in breast cancer.", "ADAR1 binds Dicer."]
    async with RagApp.from_settings(llm_settings) as app:
        results = await asyncio.gather(*(app.ask(AnswerRequest(q, top_k=3)) for q in questions))
    for result in results:
        assert result.answer.strip()
        assert result.timings_ms["total"] > 0


async def test_blank_question_is_refused_with_a_clear_message(store: VectorStore, settings: Settings) -> None:
    before = await store.count()
    result = run_cli(settings, "ask", "   ")
    assert result.returncode == 1
    assert "QUESTION is empty" in result.stderr
    assert "Traceback" not in result.stderr
    assert await store.count() == before


async def test_status_reports_healthy_services(ingested: str, settings: Settings) -> None:
    result = run_cli(settings, "status", "--json")
    status = json.loads(result.stdout)
    assert status["postgres"]["healthy"] is True
    assert status["triton"]["healthy"] is True
    assert status["triton"]["pid"] == processes.read_pid(settings.run_dir, "triton")
    assert f":{settings.triton_metrics_port}/metrics" in status["triton"]["detail"]


def test_taken_port_is_reported_by_setting_name(settings: Settings) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        other = settings.model_copy(
            update={
                "data_dir": settings.data_dir / "other",
                "triton_grpc_url": f"localhost:{free_port()}",
                "triton_http_port": port,
            }
        )
        with pytest.raises(processes.ServiceError, match=rf"port {port}, set by TRITON_HTTP_PORT"):
            triton.start(StackConfig.of(other))
    assert processes.read_pid(other.run_dir, "triton") is None
