"""`rag bench serve` (evals/bench_serve.py): one request's outcome over a swapped httpx transport, the phase
summaries and the targets from known outcomes. Pure logic, no server; the benchmark against a real `rag serve` is
in tests/agent/http/test_admission_serve.py."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent.http.loop_lag import lag_histogram
from evals.bench_serve import (
    Outcome,
    Phase,
    ServeBenchParams,
    ServerUnreachableError,
    TokenCounter,
    capacity_of,
    loop_lag_between,
    loop_lag_buckets,
    send_one,
    server_info,
    summarize,
    targets,
)
from evals.readme_tables import RESULTS_DIR, read_pages, render_pages, stale_tables

RESULT = {"answer": "Yes [1].", "citations": [], "timings_ms": {"total": 1.0}, "refused": False}


def sse(*events: tuple[str, object]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def transport(status: int, body: bytes, headers: dict[str, str] | None = None) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["question"] == "claim"
        kind = "text/event-stream" if status == 200 else "application/json"
        return httpx.Response(status, content=body, headers={"content-type": kind, **(headers or {})})

    return httpx.MockTransport(handle)


async def outcome_of(mock: httpx.MockTransport, endpoint: str = "stream") -> Outcome:
    params = ServeBenchParams(url="http://testserver", endpoint=endpoint)  # type: ignore[arg-type]
    async with httpx.AsyncClient(base_url=params.url, transport=mock) as client:
        return await send_one(client, params, "claim", time.perf_counter())


async def test_a_streamed_answer_has_its_ttft_text_events_and_result() -> None:
    body = sse(("queued", {"position": 2}), ("text", {"text": "Yes "}), ("text", {"text": "[1]."}), ("result", RESULT))
    outcome = await outcome_of(transport(200, body))
    assert outcome.kind == "answered" and outcome.answer == "Yes [1]." and outcome.text_events == 2
    assert outcome.ttft_s is not None and outcome.ttft_s <= outcome.latency_s


async def test_a_503_overloaded_is_a_rejection_with_its_retry_after() -> None:
    body = json.dumps({"error": "overloaded", "detail": "overloaded: ...; retry in 7 s"}).encode()
    outcome = await outcome_of(transport(503, body, {"retry-after": "7"}))
    assert (outcome.kind, outcome.status, outcome.retry_after_s) == ("rejected", 503, 7.0)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, sse(("text", {"text": "Ye"}), ("error", {"error": "timeout", "detail": "too long"})), "timeout"),
        (200, sse(("text", {"text": "Ye"})), "stream_ended_without_result"),
        (503, json.dumps({"error": "llm_unavailable", "detail": "down"}).encode(), "llm_unavailable"),
        (504, b"<html>gateway timeout</html>", "http_504"),
    ],
)
async def test_failures_become_error_kinds(status: int, body: bytes, kind: str) -> None:
    assert (await outcome_of(transport(status, body))).kind == kind


async def test_the_plain_endpoint_gives_the_answer_without_ttft() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/ask"
        return httpx.Response(200, json=RESULT | {"refused": True})

    outcome = await outcome_of(httpx.MockTransport(handle), endpoint="ask")
    assert outcome.kind == "answered" and outcome.model_refused and outcome.ttft_s is None


async def test_an_unreachable_server_is_a_connection_error() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    assert (await outcome_of(httpx.MockTransport(handle))).kind == "connection_error"


def answered(started: float, latency: float, ttft: float, events: int = 4) -> Outcome:
    return Outcome(started, "answered", latency, 200, ttft, answer="x", text_events=events)


def test_a_phase_summary_counts_goodput_latency_rejections_errors_and_tokens() -> None:
    phase = Phase("open", None, 2.0)
    phase.outcomes = [
        answered(0.0, 4.0, 1.0),
        answered(1.0, 9.0, 2.0),
        Outcome(2.0, "rejected", 0.02, 503, retry_after_s=5.0),
        Outcome(3.0, "rejected", 0.05, 503),
        Outcome(4.0, "timeout", 6.0, 200),
    ]
    phase.wall_s = 10.0
    summary = summarize(phase, TokenCounter(None))
    assert summary["goodput_rps"] == 0.2 and summary["answered"] == 2 and summary["requests"] == 5
    assert summary["latency_ms"] == {"p50": 6500.0, "p95": 8750.0, "p99": 8950.0, "n": 2}
    assert summary["ttft_ms"]["n"] == 2 and summary["ttft_ms"]["p50"] == 1500.0
    assert summary["rejections"]["n"] == 2 and summary["rejections"]["with_retry_after"] == 1
    assert summary["rejections"]["latency_ms"]["max"] == 50.0
    assert summary["errors"] == {"timeout": 1}
    assert summary["llm_tokens_per_s"] == 0.8  # 8 text events over 10 s


def test_targets_compare_the_open_loop_with_capacity() -> None:
    capacity_level = summarize(Phase("closed", 8, None, [answered(0.0, 10.0, 1.0)] * 4, 20.0), TokenCounter(None))
    slow_level = summarize(Phase("closed", 1, None, [answered(0.0, 5.0, 1.0)], 10.0), TokenCounter(None))
    capacity = capacity_of([slow_level, capacity_level])
    assert capacity == {"goodput_rps": 0.2, "concurrency": 8, "p99_ms": 10000.0}
    overloaded = Phase("open", None, 0.8, [answered(0.0, 15.0, 1.0)] * 3, 20.0)
    overloaded.outcomes.append(Outcome(1.0, "rejected", 0.03, 503, retry_after_s=2.0))
    checked = targets(capacity, summarize(overloaded, TokenCounter(None)))
    assert checked["goodput_over_capacity"] == {"value": 0.75, "target": ">= 0.9"}
    assert checked["admitted_p99_over_capacity_p99"]["value"] == 1.5
    assert checked["max_rejection_ms"]["value"] == 30.0
    assert checked["rejections_without_retry_after"]["value"] == 0
    assert checked["timeouts"]["value"] == 0 and checked["lost"]["value"] == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "localhost:8080"}, "--url"),
        ({"url": "http://x", "concurrencies": ()}, "--concurrency"),
        ({"url": "http://x", "overload": -1.0}, "--overload"),
        ({"url": "http://x", "endpoint": "grpc"}, "--endpoint"),
    ],
)
def test_bad_parameters_name_their_option(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServeBenchParams(**kwargs)  # type: ignore[arg-type]


def test_the_docs_tables_follow_the_stored_serve_results(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS_DIR, results, ignore=shutil.ignore_patterns("*.png"))
    stored = results / "bench-serve.json"
    data = json.loads(stored.read_text())
    data["open_loop"]["goodput_rps"] = 123.456
    data["targets"]["max_rejection_ms"]["value"] = 42.0
    stored.write_text(json.dumps(data))
    texts = read_pages()
    text = "".join(texts.values())
    assert stale_tables(text, results) == ["bench-serve", "bench-serve-targets"]
    rendered = "".join(render_pages(texts, results).values())
    assert "| 123.456 |" in rendered and "| slowest rejection, ms | 42 | < 100 | yes |" in rendered


async def test_an_unreachable_server_stops_the_run_before_any_load() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with httpx.AsyncClient(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(handle)) as client:
        with pytest.raises(ServerUnreachableError, match=r"no HTTP server answers at http://127\.0\.0\.1:9"):
            await server_info(client)


async def test_the_server_loop_lag_is_read_from_metrics_and_compared_between_two_readings() -> None:
    registry = CollectorRegistry()
    histogram = lag_histogram(registry)

    async def read() -> dict[str, float] | None:
        metrics = httpx.MockTransport(lambda request: httpx.Response(200, content=generate_latest(registry)))
        async with httpx.AsyncClient(base_url="http://testserver", transport=metrics) as client:
            return await loop_lag_buckets(client)

    for lag in (0.0, 0.3):
        histogram.observe(lag)
    before = await read()
    for lag in (0.002, 0.002, 0.2, 0.6):  # between the readings: 4 samples, 2 over 0.1 s, 1 over 0.25 s and 0.5 s
        histogram.observe(lag)
    after = await read()
    assert before is not None and before["+Inf"] == 2 and before["0.25"] == 1
    assert loop_lag_between(before, after) == {"samples": 4, "over_0.1_s": 0.5, "over_0.25_s": 0.25, "over_0.5_s": 0.25}
    assert loop_lag_between(None, after) is None and loop_lag_between(after, after) == {"samples": 0}
    without = httpx.MockTransport(lambda request: httpx.Response(200, content=b"# nothing here\n"))
    async with httpx.AsyncClient(base_url="http://testserver", transport=without) as client:
        assert await loop_lag_buckets(client) is None  # a server without the metric
