"""`rag bench serve`: end-to-end load on a running `rag serve` over HTTP (loopback), driven by SciFact claims.

What is measured, against the server at `--url` as it is configured (its own settings: admission control, LLM);
start it with `ANSWER_CACHE=false`, since the claims repeat and cached answers skip the work measured (each phase
counts the answers marked `cached`):

1. Closed loop, for each concurrency C (default 1, 8, 32, 128): C clients, each sending its next claim as soon as
   its previous request ended, until `max(requests, 2 C)` requests were sent or `max_seconds_per_level` passed; a
   client refused with 503 waits its `Retry-After` first (a well-behaved client), at most until the level's time is
   up. Capacity is the highest goodput of these levels.
2. Open loop at `overload` × capacity: requests arrive as a Poisson process (exponential gaps from numpy's seeded
   generator) whatever the server does, for `open_loop_seconds` or `open_loop_requests` arrivals, whichever comes
   first; a refused request is not retried.

Each phase ends when its last request has ended (client timeout `timeout_s`). Per phase: goodput (answers/s: HTTP
200 answers, refusals by the model included, over the phase's wall time from its first request to its last
completion), total latency and TTFT (first `text` event of `/v1/ask/stream`) p50/p95/p99 with n, rejections (503
`overloaded`) with their latency p50/p99/max and how many carried `Retry-After`, errors by kind (the `error` of an
error body or stream event, `http_<status>` without one, `client_timeout`, `connection_error`), and LLM output
tokens/s: the answers' text re-tokenized with the LLM's tokenizer (`--llm-tokenizer`, default the local model's
`tokenizer.json`; without one, the stream's text events are counted, vLLM sending about one token per event).

The report also checks the issue's targets for the open loop: goodput ≥ 0.9 × capacity, no timeouts (504 or a
stream's `timeout`), every rejection in < 100 ms with `Retry-After`, admitted answers' p99 ≤ 2 × the p99 at
capacity, and nothing lost (every request answered or rejected).

Load generator: httpx (async) with httpx-sse. Locust (gevent, closed-loop users) and the LLM load tools (guidellm,
genai-perf, inference-perf: OpenAI endpoints only) fit neither our SSE stream nor Poisson arrivals independent of
the server. Percentiles: `tools.stats.percentiles`. Progress goes to stderr; `--json` prints one JSON object.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
from httpx_sse import EventSource
from prometheus_client.parser import text_string_to_metric_families

from evals.machine import machine_info
from evals.plots import concurrency_axis, emit_report, pyplot, save_figure
from evals.scifact import claim_texts
from tools.stats import percentiles

log = logging.getLogger(__name__)

Endpoint = Literal["stream", "ask"]

TARGETS = {
    "goodput_over_capacity": ">= 0.9",
    "timeouts": "<= 0",
    "max_rejection_ms": "< 100",
    "rejections_without_retry_after": "<= 0",
    "admitted_p99_over_capacity_p99": "<= 2",
    "lost": "<= 0",
}
"""Issue 16's targets for the open loop at `overload` × capacity."""


class ServerUnreachableError(RuntimeError):
    """Nothing answers HTTP at the benchmark's `--url` (refused, unresolvable, timed out)."""


@dataclass(frozen=True)
class ServeBenchParams:
    """What one `rag bench serve` run does.

    Attributes:
        url: base URL of the running `rag serve` (loopback), e.g. `http://127.0.0.1:8080`.
        api_key: sent as `Authorization: Bearer` when the server has `API_KEY`.
        endpoint: `stream` (`/v1/ask/stream`: total latency and TTFT) or `ask` (`/v1/ask`: total latency only).
        concurrencies: closed-loop levels.
        requests: requests per closed-loop level (at least twice its concurrency are sent).
        max_seconds_per_level: stop sending in a closed-loop level after this many seconds.
        overload: open-loop arrival rate as a multiple of the measured capacity (0: no open loop).
        open_loop_seconds: how long arrivals go on, seconds.
        open_loop_requests: most arrivals of the open loop.
        timeout_s: client timeout of one request, seconds.
        top_k: passages per answer (None: the server's TOP_K).
        seed: seed of the Poisson arrivals.
        llm_tokenizer: the LLM's `tokenizer.json` (file or folder) for tokens/s (None: count stream text events).
    """

    url: str
    api_key: str | None = None
    endpoint: Endpoint = "stream"
    concurrencies: tuple[int, ...] = (1, 8, 32, 128)
    requests: int = 64
    max_seconds_per_level: float = 600.0
    overload: float = 4.0
    open_loop_seconds: float = 300.0
    open_loop_requests: int = 2000
    timeout_s: float = 600.0
    top_k: int | None = None
    seed: int = 0
    llm_tokenizer: Path | None = None

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"--url {self.url!r}: expected an http(s) URL of a running `rag serve`")
        if not self.concurrencies or min(self.concurrencies) < 1:
            raise ValueError(f"--concurrency {list(self.concurrencies)}: expected one or more levels >= 1")
        if self.requests < 1 or self.open_loop_requests < 1:
            raise ValueError("--requests and --open-loop-requests: expected at least 1")
        if self.overload < 0:
            raise ValueError(f"--overload {self.overload}: expected 0 (no open loop) or more")
        if self.endpoint not in ("stream", "ask"):
            raise ValueError(f"--endpoint {self.endpoint!r}: expected 'stream' or 'ask'")


@dataclass
class Outcome:
    """One request: when it started (s from the phase start), how it ended and how long it took.

    `kind` is `answered`, `rejected` (503 `overloaded`) or an error kind; `latency_s` is until the last byte
    (stream: the `result` event); `ttft_s` until the first `text` event (stream only)."""

    started_s: float
    kind: str
    latency_s: float
    status: int | None = None
    ttft_s: float | None = None
    retry_after_s: float | None = None
    answer: str = ""
    text_events: int = 0
    model_refused: bool = False
    cached: bool = False


@dataclass
class Phase:
    """The outcomes of one closed-loop level or of the open loop."""

    mode: Literal["closed", "open"]
    concurrency: int | None
    rate_rps: float | None
    outcomes: list[Outcome] = field(default_factory=list)
    wall_s: float = 0.0


def load_claims() -> list[str]:
    """The SciFact test claims, in file order (cycled by the load)."""
    return [text for text in claim_texts("test").values() if text.strip()]


def _error_kind(response: httpx.Response, body: bytes) -> str:
    try:
        kind = json.loads(body).get("error")
    except (ValueError, AttributeError):
        kind = None
    return str(kind) if kind else f"http_{response.status_code}"


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


async def send_one(
    client: httpx.AsyncClient, params: ServeBenchParams, claim: str, phase_start: float
) -> Outcome:
    """Ask one claim; never raises for the server's or the network's failures (they become the outcome's kind)."""
    body: dict[str, Any] = {"question": claim}
    if params.top_k is not None:
        body["top_k"] = params.top_k
    start = time.perf_counter()
    outcome = Outcome(started_s=start - phase_start, kind="connection_error", latency_s=0.0)
    try:
        path = "/v1/ask/stream" if params.endpoint == "stream" else "/v1/ask"
        async with client.stream("POST", path, json=body) as response:
            outcome.status = response.status_code
            if response.status_code != 200:
                kind = _error_kind(response, await response.aread())
                outcome.kind = "rejected" if response.status_code == 503 and kind == "overloaded" else kind
                outcome.retry_after_s = _retry_after(response)
            elif params.endpoint == "ask":
                result = json.loads(await response.aread())
                outcome.kind, outcome.answer = "answered", str(result.get("answer", ""))
                outcome.model_refused, outcome.cached = bool(result.get("refused")), bool(result.get("cached"))
            else:
                outcome.kind = "stream_ended_without_result"
                async for event in EventSource(response).aiter_sse():
                    if event.event == "text":
                        outcome.text_events += 1
                        if outcome.ttft_s is None:
                            outcome.ttft_s = time.perf_counter() - start
                    elif event.event == "result":
                        result = event.json()
                        outcome.kind, outcome.answer = "answered", str(result.get("answer", ""))
                        outcome.model_refused = bool(result.get("refused"))
                        outcome.cached = bool(result.get("cached"))
                    elif event.event == "error":
                        outcome.kind = str(event.json().get("error") or "stream_error")
    except httpx.TimeoutException:
        outcome.kind = "client_timeout"
    except httpx.HTTPError as exc:
        outcome.kind = "connection_error"
        log.debug("request failed: %r", exc)
    outcome.latency_s = time.perf_counter() - start
    return outcome


async def closed_loop(
    client: httpx.AsyncClient, params: ServeBenchParams, claims: Iterator[str], concurrency: int
) -> Phase:
    """`concurrency` clients back to back (see the module docstring)."""
    phase = Phase("closed", concurrency, None)
    budget = max(params.requests, 2 * concurrency)
    start = time.perf_counter()
    sent = 0

    async def client_loop() -> None:
        nonlocal sent
        while sent < budget and (left := params.max_seconds_per_level - (time.perf_counter() - start)) > 0:
            sent += 1
            outcome = await send_one(client, params, next(claims), start)
            phase.outcomes.append(outcome)
            if outcome.kind == "rejected":
                left = params.max_seconds_per_level - (time.perf_counter() - start)
                await asyncio.sleep(max(0.0, min(outcome.retry_after_s or 1.0, left)))

    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    phase.wall_s = _wall_s(phase)
    return phase


async def open_loop(
    client: httpx.AsyncClient, params: ServeBenchParams, claims: Iterator[str], rate_rps: float
) -> Phase:
    """Poisson arrivals at `rate_rps` (see the module docstring)."""
    phase = Phase("open", None, rate_rps)
    rng = np.random.default_rng(params.seed)
    start = time.perf_counter()
    tasks: list[asyncio.Task[Outcome]] = []
    at = float(rng.exponential(1.0 / rate_rps))
    while at < params.open_loop_seconds and len(tasks) < params.open_loop_requests:
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - start)))
        tasks.append(asyncio.create_task(send_one(client, params, next(claims), start)))
        at += float(rng.exponential(1.0 / rate_rps))
    phase.outcomes = list(await asyncio.gather(*tasks))
    phase.wall_s = _wall_s(phase)
    return phase


def _wall_s(phase: Phase) -> float:
    return max((o.started_s + o.latency_s for o in phase.outcomes), default=0.0)


class TokenCounter:
    """Output tokens of answer texts with the LLM's tokenizer (`tokenizers`), or None without one."""

    def __init__(self, path: Path | None) -> None:
        self.source = "stream text events"
        self._tokenizer: Any = None
        if path is not None:
            from tokenizers import Tokenizer

            file = path / "tokenizer.json" if path.is_dir() else path
            if not file.is_file():
                raise ValueError(f"--llm-tokenizer {path}: no tokenizer.json there")
            self._tokenizer = Tokenizer.from_file(str(file))
            self.source = f"answer text re-tokenized with {file}"

    def count(self, outcome: Outcome) -> int:
        """Tokens of one answer (0 unless answered)."""
        if outcome.kind != "answered":
            return 0
        if self._tokenizer is None:
            return outcome.text_events
        return len(self._tokenizer.encode(outcome.answer, add_special_tokens=False).ids)


def _ms(values: Sequence[float]) -> dict[str, float | int]:
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in percentiles(np.asarray(values) * 1000).items()}


def summarize(phase: Phase, tokens: TokenCounter) -> dict[str, Any]:
    """The report entry of one phase (see the module docstring); latencies in ms."""
    answered = [o for o in phase.outcomes if o.kind == "answered"]
    rejected = [o for o in phase.outcomes if o.kind == "rejected"]
    errors = Counter(o.kind for o in phase.outcomes if o.kind not in ("answered", "rejected"))
    wall = phase.wall_s or float("nan")
    rejection_ms = _ms([o.latency_s for o in rejected])
    if rejected:
        rejection_ms["max"] = round(max(o.latency_s for o in rejected) * 1000, 1)
    return {
        "mode": phase.mode,
        "concurrency": phase.concurrency,
        "rate_rps": None if phase.rate_rps is None else round(phase.rate_rps, 4),
        "requests": len(phase.outcomes),
        "answered": len(answered),
        "model_refusals": sum(o.model_refused for o in answered),
        "cached": sum(o.cached for o in answered),  # answers from the answer cache: run the server with it off
        "wall_s": round(phase.wall_s, 2),
        "goodput_rps": round(len(answered) / wall, 4) if answered else 0.0,
        "latency_ms": _ms([o.latency_s for o in answered]),
        "ttft_ms": _ms([o.ttft_s for o in answered if o.ttft_s is not None]),
        "rejections": {
            "n": len(rejected),
            "latency_ms": rejection_ms,
            "with_retry_after": sum(o.retry_after_s is not None for o in rejected),
            "retry_after_s_max": max((o.retry_after_s or 0.0 for o in rejected), default=None),
        },
        "errors": dict(sorted(errors.items())),
        "llm_tokens_per_s": round(sum(tokens.count(o) for o in answered) / wall, 2) if answered else 0.0,
    }


def capacity_of(levels: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The closed-loop level with the highest goodput: `{"goodput_rps", "concurrency", "p99_ms"}`."""
    best = max(levels, key=lambda level: level["goodput_rps"])
    return {
        "goodput_rps": best["goodput_rps"],
        "concurrency": best["concurrency"],
        "p99_ms": best["latency_ms"].get("p99"),
    }


def targets(capacity: dict[str, Any], overloaded: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The open loop's figures against `TARGETS` (values None where nothing was measured)."""
    errors = overloaded["errors"]
    cap_p99, p99 = capacity.get("p99_ms"), overloaded["latency_ms"].get("p99")
    rejections = overloaded["rejections"]
    values: dict[str, float | None] = {
        "goodput_over_capacity": (
            round(overloaded["goodput_rps"] / capacity["goodput_rps"], 3) if capacity["goodput_rps"] else None
        ),
        "timeouts": errors.get("timeout", 0) + errors.get("http_504", 0),
        "max_rejection_ms": rejections["latency_ms"].get("max"),
        "rejections_without_retry_after": rejections["n"] - rejections["with_retry_after"],
        "admitted_p99_over_capacity_p99": round(p99 / cap_p99, 3) if p99 is not None and cap_p99 else None,
        "lost": sum(errors.values()),
    }
    return {name: {"value": values[name], "target": target} for name, target in TARGETS.items()}


async def server_info(client: httpx.AsyncClient) -> dict[str, Any]:
    """The server's `/health` checks (what it serves: Triton model, store, LLM) and the number of documents the
    bench's key sees (`GET /v1/documents`), or why they were unreadable.

    Raises:
        ServerUnreachableError: nothing answers HTTP at the client's base URL.
    """
    try:
        response = await client.get("/health", timeout=60)
    except httpx.TransportError as exc:
        raise ServerUnreachableError(f"no HTTP server answers at {client.base_url} ({exc!r})") from None
    try:
        checks: dict[str, Any] = response.json().get("checks", {})
        info = {name: check.get("detail") for name, check in checks.items()}
    except (ValueError, AttributeError) as exc:
        return {"error": f"/health answered HTTP {response.status_code}: {exc!r}"}
    # `/health` is open to every tenant and counts nothing; the store's size is what the bench's key may list
    listed = await client.get("/v1/documents", params={"limit": 1}, timeout=60)
    try:
        info["documents"] = f"{int(listed.json()['total'])} documents"
    except (ValueError, KeyError, TypeError) as exc:
        info["documents"] = f"unreadable: GET /v1/documents answered HTTP {listed.status_code} ({exc!r})"
    return info


LAG_BOUNDS_S = ("0.1", "0.25", "0.5")
"""Loop lags (seconds, buckets of `rag_event_loop_lag_seconds`) whose share of samples the report gives."""


async def loop_lag_buckets(client: httpx.AsyncClient) -> dict[str, float] | None:
    """The server's `rag_event_loop_lag_seconds` histogram from its `/metrics`: cumulative sample count per bucket
    bound `le` (seconds, as text; `+Inf` is the total), parsed with prometheus-client's text parser; None when the
    server does not export it or `/metrics` cannot be read."""
    try:
        response = await client.get("/metrics", timeout=30)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    buckets = {
        sample.labels["le"]: sample.value
        for family in text_string_to_metric_families(response.text)
        if family.name == "rag_event_loop_lag_seconds"
        for sample in family.samples
        if sample.name.endswith("_bucket")
    }
    return buckets or None


def loop_lag_between(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    """The loop-lag samples taken between two `loop_lag_buckets` readings: their number and the share later than
    each of `LAG_BOUNDS_S` (the wait any request ready at that moment had, refusals included); None without both."""
    if before is None or after is None:
        return None
    samples = after["+Inf"] - before.get("+Inf", 0.0)
    if samples <= 0:
        return {"samples": 0}
    late = {f"over_{b}_s": round(1 - (after[b] - before.get(b, 0.0)) / samples, 4) for b in LAG_BOUNDS_S if b in after}
    return {"samples": int(samples), **late}


async def run_serve_bench(params: ServeBenchParams) -> dict[str, Any]:
    """Run the closed-loop levels, then the open loop at `overload` × capacity; returns the `--json` report.

    Raises:
        ServerUnreachableError: nothing answers at `params.url` (checked first, with `/health`).
    """
    tokens = TokenCounter(params.llm_tokenizer)
    claims = itertools.cycle(load_claims())
    machine = machine_info()
    headers = {"Authorization": f"Bearer {params.api_key}"} if params.api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=max(params.concurrencies))
    async with httpx.AsyncClient(
        base_url=params.url, headers=headers, timeout=params.timeout_s, limits=limits
    ) as client:
        server = await server_info(client)
        levels = []
        for concurrency in params.concurrencies:
            levels.append(summarize(await closed_loop(client, params, claims, concurrency), tokens))
            log.info("closed loop: %s", levels[-1])
        capacity = capacity_of(levels)
        overloaded = None
        if params.overload > 0 and capacity["goodput_rps"] > 0:
            rate = params.overload * capacity["goodput_rps"]
            lag_before = await loop_lag_buckets(client)
            overloaded = summarize(await open_loop(client, params, claims, rate), tokens)
            overloaded["server_loop_lag"] = loop_lag_between(lag_before, await loop_lag_buckets(client))
            log.info("open loop: %s", overloaded)
    machine["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    return {
        "levels": levels,
        "capacity": capacity,
        "open_loop": overloaded,
        "targets": targets(capacity, overloaded) if overloaded else None,
        "server": server,
        "tokens_source": tokens.source,
        "machine": machine,
        "params": {**asdict(params), "api_key": None, "llm_tokenizer": str(params.llm_tokenizer or "")},
    }


def write_plot(report: dict[str, Any], path: Path) -> Path:
    """Goodput and latency (total p50/p99, TTFT p99) against closed-loop concurrency; the open loop as dashed
    horizontal lines."""
    fig, (ax_rate, ax_lat) = pyplot().subplots(1, 2, figsize=(11, 4))
    levels = sorted(report["levels"], key=lambda level: level["concurrency"])
    xs = [level["concurrency"] for level in levels]
    ax_rate.plot(xs, [level["goodput_rps"] for level in levels], marker="o", label="closed loop")
    for key, stat, style in (("latency_ms", "p50", "o-"), ("latency_ms", "p99", "s-"), ("ttft_ms", "p99", "^-")):
        ys = [level[key].get(stat, float("nan")) / 1000 for level in levels]
        ax_lat.plot(xs, ys, style, label=f"{'total' if key == 'latency_ms' else 'TTFT'} {stat}")
    open_loop = report.get("open_loop")
    if open_loop:
        label = f"open loop {open_loop['rate_rps']:.2f} req/s ({report['params']['overload']:g}x capacity)"
        ax_rate.axhline(open_loop["goodput_rps"], color="red", linestyle="--", label=label)
        if open_loop["latency_ms"].get("p99") is not None:
            ax_lat.axhline(open_loop["latency_ms"]["p99"] / 1000, color="red", linestyle="--", label="open loop p99")
    concurrency_axis(ax_rate, xs, "goodput (answers/s)", "concurrent clients (closed loop)")
    concurrency_axis(ax_lat, xs, "seconds", "concurrent clients (closed loop)")
    for ax in (ax_rate, ax_lat):
        ax.legend(fontsize=8)
    m = report["machine"]
    llm = str(report.get("server", {}).get("llm", "?")).split(" at ")[0]
    title = (
        f"rag bench serve ({report['params']['endpoint']}, LLM {llm}): {m['cores']} cores ({m['cpu']}), "
        f"load {m['load_average_1m_at_start']}, {m['date_utc'][:10]}"
    )
    return save_figure(fig, path, title)


def _p(stats: dict[str, Any], key: str) -> str:
    value = stats.get(key)
    return "–" if value is None else f"{value / 1000:.2f}"


def render(report: dict[str, Any], console: Any) -> None:
    """Print the phases and the targets as Rich tables."""
    from rich.table import Table

    m = report["machine"]
    table = Table(
        title=f"rag bench serve: {report['params']['url']} ({report['params']['endpoint']}), {m['cores']} cores, "
        f"load avg {m['load_average_1m_at_start']} -> {m['load_average_1m_at_end']}, {m['date_utc']}"
    )
    columns = ("phase", "requests", "answered", "answers/s", "p50 s", "p95 s", "p99 s", "TTFT p50 s", "TTFT p99 s")
    for col in (*columns, "rejected (max ms)", "errors", "tokens/s"):
        table.add_column(col, justify="left" if col in ("phase", "errors") else "right")
    phases = list(report["levels"]) + ([report["open_loop"]] if report["open_loop"] else [])
    for p in phases:
        rejected = p["rejections"]
        table.add_row(
            phase_label(p),
            str(p["requests"]),
            str(p["answered"]),
            f"{p['goodput_rps']:.3f}",
            _p(p["latency_ms"], "p50"),
            _p(p["latency_ms"], "p95"),
            _p(p["latency_ms"], "p99"),
            _p(p["ttft_ms"], "p50"),
            _p(p["ttft_ms"], "p99"),
            f"{rejected['n']} ({rejected['latency_ms'].get('max', '–')})",
            ", ".join(f"{k} {v}" for k, v in p["errors"].items()) or "–",
            f"{p['llm_tokens_per_s']:.1f}",
        )
    console.print(table)
    if report["targets"]:
        checks = Table(title=f"open loop against the targets (capacity {report['capacity']['goodput_rps']} answers/s)")
        for col in ("figure", "value", "target"):
            checks.add_column(col)
        for name, figure in report["targets"].items():
            checks.add_row(name, str(figure["value"]), figure["target"])
        console.print(checks)


def phase_label(phase: dict[str, Any]) -> str:
    """`closed, 8 clients` or `open, 1.80 req/s`."""
    if phase["mode"] == "closed":
        return f"closed, {phase['concurrency']} clients"
    return f"open, {phase['rate_rps']:.2f} req/s"


def run_serve_bench_command(
    params: ServeBenchParams, as_json: bool, plot: Path, output: Path | None
) -> dict[str, Any]:
    """`rag bench serve`: run, write the plot and the JSON report (`output`), print tables or (`as_json`) only the
    JSON object on stdout."""
    log.setLevel(logging.INFO)  # progress through the CLI's stderr handler
    report = asyncio.run(run_serve_bench(params))
    report["plot"] = str(write_plot(report, plot))
    emit_report(report, as_json, output, render)
    return report
