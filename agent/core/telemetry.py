"""Observability of the app: OpenTelemetry traces per answer and Prometheus metrics, from the same timers.

- Traces: only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (`configure_tracing`, called by the HTTP API at start-up):
  an SDK `TracerProvider` exporting OTLP over HTTP (`<endpoint>/v1/traces`, each export bounded by
  `EXPORT_TIMEOUT_S`, retries included; shut down by `shutdown_telemetry` within `SHUTDOWN_TIMEOUT_S` when
  `rag serve` exits, so that an unreachable collector never holds the exit), pydantic-ai's own instrumentation
  (`Agent.instrument_all(InstrumentationSettings(...))`: agent run and model request spans), asyncpg's
  (opentelemetry-instrumentation-asyncpg: one span per query), and the stage spans of `tools.timing`
  (`rag.embed`, `rag.triton_infer`, `rag.dense_search`, `rag.full_text_search`, `rag.llm` with `llm_ttft_ms`)
  under one `rag.answer` span per answer. Unset: nothing is configured and the API's no-op tracer is used.
- Metrics (`prometheus-client`, served at `/metrics` by the HTTP API): `rag_requests_total{outcome}` (answered,
  refused, or the error kind) and `rag_stage_duration_seconds{stage}` histograms (embed, search, llm, llm_ttft,
  total), observed from the answer's own `timings_ms`: the numbers in a result and in the metrics are one
  measurement.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from prometheus_client import Counter, Histogram
from prometheus_client import make_asgi_app as _make_asgi_app
from pydantic_ai import Agent, InstrumentationSettings
from starlette.types import ASGIApp

from agent.core.errors import AgentError, InputError
from agent.core.results import AskResult
from tools.timing import TRACER_NAME

log = logging.getLogger(__name__)

REQUESTS = Counter(
    "rag_requests",
    "Answers by outcome: answered, refused, or the error kind (agent.core.errors, bad_request, ...).",
    ["outcome"],
)
STAGE_SECONDS = Histogram(
    "rag_stage_duration_seconds",
    "Duration of one stage of an answer, seconds (the answer's timings_ms).",
    ["stage"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0),
)

EXPORT_TIMEOUT_S = 2.0
"""Longest one OTLP export may take, retries included (the SDK's default is 10 s), seconds."""
SHUTDOWN_TIMEOUT_S = 3.0
"""Longest `rag serve` waits at exit for the last spans to be exported, seconds; then they are dropped."""

_provider: TracerProvider | None = None


def configure_tracing(endpoint: str | None, exporter: SpanExporter | None = None) -> TracerProvider | None:
    """Set up tracing once per process: OTLP over HTTP to `endpoint` (e.g. `http://otel-collector:4318`), or to
    `exporter` when given (tests: an in-memory exporter, exported synchronously). Returns the provider, or None when
    there is nowhere to export (no SDK set up, nothing instrumented)."""
    global _provider
    if _provider is not None:
        return _provider
    if exporter is None:
        if not endpoint:
            return None
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor: SimpleSpanProcessor | BatchSpanProcessor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=EXPORT_TIMEOUT_S),
            export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
        )
    else:
        processor = SimpleSpanProcessor(exporter)
    # no exit hook of the SDK's own (it waits up to 30 s per processor): `shutdown_telemetry` bounds the exit
    provider = TracerProvider(resource=Resource.create({"service.name": "triton-rag"}), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    try:
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    except ImportError:
        log.warning("opentelemetry-instrumentation-asyncpg is not installed: no spans for Postgres queries")
    else:
        instrumentor: Any = AsyncPGInstrumentor  # the instrumentation packages are untyped
        instrumentor().instrument(tracer_provider=provider)
    _provider = provider
    return provider


def shutdown_telemetry(provider: TracerProvider | None = None, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> bool:
    """Export the last buffered spans and shut the tracer provider down (`provider`, default: the one
    `configure_tracing` set up), waiting at most `timeout_s` seconds: the SDK's shutdown runs in a daemon thread,
    which a collector that never answers keeps only until the process ends. Returns False (and logs a warning)
    when it gave up; True when done or when tracing was never set up."""
    provider = provider or _provider
    if provider is None:
        return True
    done = threading.Thread(target=provider.shutdown, name="otel-shutdown", daemon=True)
    done.start()
    done.join(timeout_s)
    if done.is_alive():
        log.warning("telemetry: the trace collector did not take the last spans within %.1f s; dropped", timeout_s)
        return False
    return True


@contextmanager
def answer_span(policy: str) -> Iterator[list[AskResult]]:
    """Wrap one answer: a `rag.answer` span (the parent of its stage spans) and, on exit, the request counter and
    the stage histograms. The caller appends the `AskResult` to the yielded list; an exception counts as its kind
    (`AgentError.kind`, `bad_request` for `InputError`, else the exception class) and is re-raised."""
    results: list[AskResult] = []
    with trace.get_tracer(TRACER_NAME).start_as_current_span("rag.answer", attributes={"policy": policy}) as span:
        try:
            yield results
        except AgentError as exc:
            REQUESTS.labels(exc.kind).inc()
            raise
        except InputError:
            REQUESTS.labels(InputError.kind).inc()
            raise
        except Exception as exc:
            REQUESTS.labels(type(exc).__name__).inc()
            raise
        for result in results:
            outcome = "refused" if result.refused else "answered"
            REQUESTS.labels(outcome).inc()
            span.set_attribute("outcome", outcome)
            for stage, ms in result.timings_ms.items():
                STAGE_SECONDS.labels(stage).observe(ms / 1000)
                span.set_attribute(f"{stage}_ms", ms)


def metrics_app() -> ASGIApp:
    """The Prometheus exposition endpoint (text format) of this process's default registry."""
    app: ASGIApp = _make_asgi_app()
    return app
