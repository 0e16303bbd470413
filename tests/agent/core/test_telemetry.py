"""Observability of one answer: the spans it produces (answer, embed, Triton inference, dense and full-text search,
Postgres queries, the pydantic-ai model request, the LLM stage with TTFT) in an in-memory span exporter, and the
Prometheus series on `/metrics`, fed by the same timings the result carries. Real Triton and Postgres; the model is
a pydantic-ai FunctionModel."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent.config.settings import Settings
from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from agent.core.rag_agent import build_agent
from agent.core.telemetry import configure_tracing, metrics_app
from agent.http import create_app

COVERED = "Vitamin B12 deficiency and homocysteine levels"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = configure_tracing(None, memory)
    assert provider is not None
    yield memory


def test_no_endpoint_means_no_tracing_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    import agent.core.telemetry as telemetry

    monkeypatch.setattr(telemetry, "_provider", None)  # as in a fresh process, whatever other tests configured
    assert configure_tracing(None) is None and telemetry._provider is None
    assert configure_tracing("") is None and telemetry._provider is None


async def test_one_answer_produces_the_spans_and_metrics(
    exporter: InMemorySpanExporter, ingested: str, triton_server: Settings, settings: Settings
) -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for piece in ("Homocysteine ", "rises [1]."):
            yield piece

    exporter.clear()
    app_settings = settings.model_copy(update={"llm_base_url": "http://127.0.0.1:9/v1", "agent_policy": "always"})
    async with RagApp.from_settings(app_settings) as rag:
        rag.agents["always"] = build_agent(FunctionModel(stream_function=stream), {"max_tokens": 32}, "always")
        result = await rag.ask(AnswerRequest(COVERED, top_k=3))
    assert not result.refused
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    for name in ("rag.answer", "rag.embed", "rag.triton_infer", "rag.dense_search", "rag.full_text_search", "rag.llm"):
        assert name in names, f"{name} missing from {names}"
    assert any("chat" in n or "agent run" in n for n in names), f"no pydantic-ai span in {names}"
    if importlib.util.find_spec("opentelemetry.instrumentation.asyncpg") is not None:
        assert any(s.attributes and s.attributes.get("db.system") == "postgresql" for s in spans), names
    by_name = {s.name: s for s in spans}
    answer_span = by_name["rag.answer"]
    assert answer_span.attributes is not None and answer_span.attributes["outcome"] == "answered"
    for child in ("rag.embed", "rag.dense_search", "rag.full_text_search"):
        parent = by_name[child].parent
        assert parent is not None and parent.trace_id == answer_span.context.trace_id

    # The span attributes and the result's timings_ms are the same measurement.
    def attr_ms(name: str, key: str = "duration_ms") -> float:
        attributes = by_name[name].attributes
        assert attributes is not None
        value = attributes[key]
        assert isinstance(value, int | float), (name, key, value)
        return float(value)

    assert round(attr_ms("rag.embed"), 1) == result.timings_ms["embed"]
    assert round(attr_ms("rag.llm", "llm_ttft_ms"), 1) == result.timings_ms["llm_ttft"]
    # The two search legs run concurrently; `search` is the longer one, plus the lookup of the dense cosine of the
    # passages only full-text search found (when there were any).
    search_ms = max(attr_ms("rag.dense_search"), attr_ms("rag.full_text_search"))
    if "rag.dense_scores" in by_name:
        search_ms += attr_ms("rag.dense_scores")
    assert round(search_ms, 1) == pytest.approx(result.timings_ms["search"], abs=0.11)

    # /metrics on the HTTP API serves the counters and histograms this answer fed.
    assert "/metrics" in {getattr(r, "path", "") for r in create_app(app_settings).routes}
    app = FastAPI()
    app.mount("/metrics", metrics_app())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
        text = (await client.get("/metrics/")).text
    assert 'rag_requests_total{outcome="answered"}' in text
    for stage in ("embed", "search", "llm", "llm_ttft", "total"):
        assert f'rag_stage_duration_seconds_count{{stage="{stage}"}}' in text, stage
