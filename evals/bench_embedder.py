"""`rag bench embedder`: load test of the embedding service, four setups on the same machine and model.

Setups (all `all-minilm-l6-v2`, fp32, CPU, the same thread count `T` for the model everywhere):

1. `triton_dynamic`: a Triton started here from `model_repository/`, `dynamic_batching` on; the real client
   (`tools.embedder.TritonEmbedder` over `tritonclient.grpc.aio`) pads each text to its length bucket; the served
   graph pools and L2-normalises, so each request returns one 384-float embedding.
2. `triton_no_batching`: the same server and model reloaded with `dynamic_batching` removed (Triton's model
   repository extension, config override), so every request is one model execution.
3. `naive`: FastAPI + Hugging Face Transformers (PyTorch), one forward pass per request (`evals.naive_server`,
   uvicorn subprocess, `torch.set_num_threads(T)`), called over HTTP with httpx.
4. `ceiling`: the same pooled graph under ONNX Runtime in this process (`intra_op_num_threads=T`), no serving
   layer, tokenization and padding included, at the batch size (of 1, 8, 16, 32, 64) with the highest throughput.

Load: `N` requests of one text each, at most `C` in flight (C asyncio workers), for `C` in the concurrency sweep
and two text lengths: `short` = SciFact test claims (~20 tokens) as queries, `abstract` = SciFact abstracts
(`title\n\ntext`, the ingestion form; mostly cut at 256 tokens) as documents. Latency is per request, end to end
as the caller sees it (client tokenization included). Server mean batch = delta of Triton's `inference_count` over
`execution_count` (statistics extension) for the point.

Optional extras: the int8 variant (`all-minilm-l6-v2-int8`, when exported) on Triton with dynamic batching and in
process, at concurrency 32; a `max_queue_delay_microseconds` sweep for the dynamic batcher (`--queue-delays-us`).

The client, the servers and the ceiling share the machine's cores: on a 2-core machine the load generator's own
CPU time (tokenization, gRPC/HTTP) competes with the server; the ceiling pays none of that.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from agent.app import build_embedder
from agent.settings import Settings
from evals.machine import machine_info
from evals.plots import concurrency_axis, emit_report, pyplot, save_figure
from evals.scifact import claim_texts, load_corpus
from infra import processes, triton
from infra.config import StackConfig
from tools.embedder import TextKind, TritonEmbedder, length_buckets, pad_to_bucket
from tools.model_specs import get_spec
from tools.onnx_session import open_session, run_pooled

log = logging.getLogger(__name__)

MODEL = "all-minilm-l6-v2"
INT8_MODEL = "all-minilm-l6-v2-int8"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
"""The directory holding the `evals` package (the source checkout, or site-packages when installed)."""
CEILING_BATCH_SIZES = (1, 8, 16, 32, 64)
NAIVE_NAME = "naive-embedder"
TRITON_SETUPS = ("triton_dynamic", "triton_no_batching")
REPORT_CONCURRENCY = 32
"""The concurrency of the headline figures and the targets (issue: "at concurrency 32 on short queries")."""


@dataclass
class BenchParams:
    """What one benchmark run does.

    Attributes:
        requests: requests per (setup, short, concurrency) point.
        abstract_requests: requests per (setup, abstract, concurrency) point (abstracts cost ~15x a claim).
        buckets: the client's padded lengths (default `tools.embedder.length_buckets`).
        concurrencies: requests in flight, swept.
        lengths: text classes, `short` and/or `abstract`.
        setups: which of triton_dynamic, triton_no_batching, naive, ceiling to run.
        threads: model threads of every setup (ORT intra-op in Triton and in process, torch in the naive server).
        queue_delay_us: the dynamic batcher's `max_queue_delay_microseconds` for `triton_dynamic`.
        queue_delays_us: extra delays to sweep at short / concurrency 32 (empty: no sweep).
        int8: also measure the int8 model at concurrency 32 when it is exported.
        max_seconds_per_point: stop issuing requests of one point after this many seconds.
        port_base: first of the ports the benchmark's servers use (Triton gRPC/HTTP/metrics, naive server);
            0 picks free ports.
        data_dir: where the benchmark's servers keep PID files and logs.
    """

    requests: int = 200
    abstract_requests: int = 48
    buckets: tuple[int, ...] | None = None
    concurrencies: tuple[int, ...] = (1, 8, 32, 64)
    lengths: tuple[str, ...] = ("short", "abstract")
    setups: tuple[str, ...] = ("triton_dynamic", "triton_no_batching", "naive", "ceiling")
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    queue_delay_us: int = 2000
    queue_delays_us: tuple[int, ...] = ()
    int8: bool = True
    max_seconds_per_point: float = 30.0
    port_base: int = 0
    data_dir: Path = Path(".rag/bench")


@dataclass
class Point:
    """One measured point. Latency in ms (numpy percentiles, linear interpolation) over `n` requests."""

    setup: str
    length: str
    concurrency: int
    n: int
    rps: float
    seq_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_batch: float
    wall_s: float


def load_texts() -> dict[str, list[str]]:
    """SciFact texts: `short` = the test claims, `abstract` = the first 2,000 abstracts in the form ingestion embeds
    (`CorpusDoc.content`: title, blank line, text)."""
    claims = list(claim_texts("test").values())
    abstracts = [doc.content for doc in load_corpus().values() if doc.content.strip()][:2000]
    return {"short": claims, "abstract": abstracts}


def n_requests(params: BenchParams, length: str) -> int:
    """Requests per point for texts of `length`."""
    return params.requests if length == "short" else params.abstract_requests


def kind_of(length: str) -> TextKind:
    """Short texts are queries (query prefix, if the model has one), abstracts are documents."""
    return "query" if length == "short" else "document"


def summarize(setup: str, length: str, concurrency: int, latencies_s: Sequence[float], wall_s: float) -> Point:
    """A `Point` from per-request latencies (seconds) and the wall time of the point (seconds)."""
    ms = np.asarray(latencies_s, dtype=np.float64) * 1000
    p50, p95, p99 = (float(v) for v in np.percentile(ms, [50, 95, 99]))
    rps = len(ms) / wall_s
    return Point(setup, length, concurrency, len(ms), rps, rps, p50, p95, p99, 1.0, wall_s)


async def run_load(
    call: Callable[[str], Awaitable[object]], texts: Sequence[str], n: int, concurrency: int, max_seconds: float
) -> tuple[list[float], float]:
    """Send `n` calls (texts cycled) with `concurrency` workers; stop issuing after `max_seconds`.

    Returns:
        per-call latencies in seconds (completed calls only) and the wall time in seconds.
    """
    latencies: list[float] = []
    issued = 0
    start = time.perf_counter()
    deadline = start + max_seconds

    async def worker() -> None:
        nonlocal issued
        while issued < n and time.perf_counter() < deadline:
            text = texts[issued % len(texts)]
            issued += 1
            t0 = time.perf_counter()
            await call(text)
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start


# --- Triton ------------------------------------------------------------------------------------------------------


def bench_settings(params: BenchParams) -> Settings:
    """Settings of the benchmark's own Triton (own data dir and ports; never the running stack's)."""
    ports = [params.port_base + i for i in range(3)] if params.port_base else [processes.free_port() for _ in range(3)]
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=params.data_dir,
        triton_grpc_url=f"127.0.0.1:{ports[0]}",
        triton_http_port=ports[1],
        triton_metrics_port=ports[2],
        embedder_model=MODEL,
    )


async def configure(
    embedder: TritonEmbedder, threads: int, queue_delay_us: int | None, base: dict[str, Any] | None = None
) -> dict[str, Any]:
    """(Re)load the embedder's model with its repository config, `threads` ORT intra-op threads and the given batcher.

    `queue_delay_us=None` removes `dynamic_batching` (Triton then runs each request as it comes); otherwise the
    repository's `dynamic_batching` (queue policy included) is kept with `max_queue_delay_microseconds` replaced.
    Uses the model repository extension's config override (`TritonEmbedder.load_model`); returns the base config.
    """
    if base is None:
        base = await embedder.model_config()
    config = json.loads(json.dumps(base))
    config["parameters"] = {
        "intra_op_thread_count": {"string_value": str(threads)},
        "inter_op_thread_count": {"string_value": "1"},
    }
    batching = config.pop("dynamic_batching", {})
    if queue_delay_us is not None:
        config["dynamic_batching"] = {**batching, "max_queue_delay_microseconds": str(queue_delay_us)}
    await embedder.load_model(config=config)
    return base


async def server_counts(embedder: TritonEmbedder) -> tuple[float, float]:
    """(inference_count, execution_count) of the embedder's model (Triton statistics extension, cumulative)."""
    stats = await embedder.inference_statistics()
    return stats["inference_count"], stats["execution_count"]


async def triton_points(
    embedder: TritonEmbedder,
    setup: str,
    texts: dict[str, list[str]],
    params: BenchParams,
    concurrencies: Sequence[int],
) -> list[Point]:
    """Sweep lengths x `concurrencies` through the Triton client; mean batch from the server statistics."""
    points = []
    for length in params.lengths:
        kind = kind_of(length)

        async def call(text: str, kind: TextKind = kind) -> object:
            return await embedder.embed([text], kind)

        for concurrency in concurrencies:
            await run_load(call, texts[length], min(8, concurrency), concurrency, 10.0)  # warm-up
            before = await server_counts(embedder)
            latencies, wall = await run_load(
                call, texts[length], n_requests(params, length), concurrency, params.max_seconds_per_point
            )
            after = await server_counts(embedder)
            point = summarize(setup, length, concurrency, latencies, wall)
            executions = after[1] - before[1]
            point.mean_batch = (after[0] - before[0]) / executions if executions else 0.0
            log.info("%s", point)
            points.append(point)
    return points


# --- naive server ------------------------------------------------------------------------------------------------


def start_naive(params: BenchParams, port: int) -> None:
    """Start `evals.naive_server` with uvicorn (detached, PID file in the bench run dir) and wait for /health.

    Raises:
        processes.ServiceError: the port is taken or the server does not become ready in 180 s.
    """
    run_dir = params.data_dir.resolve() / "run"
    processes.require_free_ports(NAIVE_NAME, {"--port-base + 3": port})
    argv = [sys.executable, "-m", "uvicorn", "evals.naive_server:app", "--host", "127.0.0.1", "--port", str(port)]
    env = dict(os.environ, NAIVE_MODEL=MODEL, NAIVE_THREADS=str(params.threads), PYTHONPATH=str(PACKAGE_ROOT))
    env["HF_HUB_OFFLINE"] = "1"
    pid = processes.spawn(run_dir, NAIVE_NAME, argv, env=env)

    def ready() -> bool:
        try:
            return bool(httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).json()["ready"])
        except httpx.HTTPError:
            return False

    processes.wait_until_ready(NAIVE_NAME, ready, 180.0, pid, run_dir)


async def naive_points(texts: dict[str, list[str]], params: BenchParams, port: int) -> list[Point]:
    """Sweep lengths x concurrencies against the naive server over HTTP (httpx, one connection per worker)."""
    points = []
    limits = httpx.Limits(
        max_connections=max(params.concurrencies), max_keepalive_connections=max(params.concurrencies)
    )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=120.0) as http:

        async def call(text: str) -> object:
            response = await http.post("/embed", json={"text": text})
            response.raise_for_status()
            return response.json()

        for length in params.lengths:
            for concurrency in params.concurrencies:
                await run_load(call, texts[length], min(8, concurrency), concurrency, 10.0)
                latencies, wall = await run_load(
                    call, texts[length], n_requests(params, length), concurrency, params.max_seconds_per_point
                )
                point = summarize("naive", length, concurrency, latencies, wall)
                log.info("%s", point)
                points.append(point)
    return points


# --- in-process ceiling ------------------------------------------------------------------------------------------


def ceiling_points(
    embedder: TritonEmbedder, model_file: Path, setup: str, texts: dict[str, list[str]], params: BenchParams
) -> tuple[list[Point], dict[str, dict[int, float]]]:
    """The served (pooled) graph under ONNX Runtime in process at each of CEILING_BATCH_SIZES; the best batch size
    per length is the ceiling.

    `embedder` is used only for tokenization (same truncation) and its bucket list; nothing is sent to Triton.
    Texts are sorted by length first (the best case for padding), so this is an upper bound for any server.

    Returns:
        one point per length (the best batch size; latency = per batch, tokenization + padding + run) and the
        throughput in sequences/s of every batch size tried, per length.
    """
    session = open_session(model_file, params.threads)
    points: list[Point] = []
    curves: dict[str, dict[int, float]] = {}
    for length in params.lengths:
        pool = texts[length]
        kind = kind_of(length)
        sample = [pool[i % len(pool)] for i in range(max(n_requests(params, length), max(CEILING_BATCH_SIZES)))]
        # Sorted by token count, as the client sorts a multi-text call: each batch pads to the least bucket.
        lengths = [len(t) for t in embedder.tokenize(sample, kind)]
        sample = [sample[i] for i in np.argsort(lengths, kind="stable")]

        def run_batch(batch: list[str], kind: TextKind = kind) -> npt.NDArray[np.float32]:
            input_ids, mask = pad_to_bucket(embedder.tokenize(batch, kind), embedder.buckets)
            return run_pooled(session, input_ids, mask)

        best: Point | None = None
        curves[length] = {}
        for batch_size in CEILING_BATCH_SIZES:
            batches = [sample[i : i + batch_size] for i in range(0, len(sample), batch_size)]
            run_batch(batches[0])  # warm-up
            latencies = []
            start = time.perf_counter()
            for batch in batches:
                t0 = time.perf_counter()
                run_batch(batch)
                latencies.append(time.perf_counter() - t0)
                if time.perf_counter() - start > params.max_seconds_per_point:
                    break
            wall = time.perf_counter() - start
            done = sum(len(b) for b in batches[: len(latencies)])
            point = summarize(setup, length, batch_size, latencies, wall)
            point.seq_per_s = point.rps = done / wall
            point.mean_batch = float(batch_size)
            curves[length][batch_size] = point.seq_per_s
            if best is None or point.seq_per_s > best.seq_per_s:
                best = point
        assert best is not None
        log.info("%s", best)
        points.append(best)
    return points, curves


# --- the run -----------------------------------------------------------------------------------------------------


async def run_benchmark(params: BenchParams) -> dict[str, Any]:
    """Run every requested setup and return the report (see `rag bench embedder --json`)."""
    logging.getLogger("tools.embedder").setLevel(logging.ERROR)  # abstracts are truncated on purpose
    texts = load_texts()
    settings = bench_settings(params)
    machine = machine_info(
        {
            "triton": "2.51 (tritonserver of nvidia-pytriton 0.7, CPU Python-based onnxruntime backend)",
            "model_threads": params.threads,
        }
    )
    points: list[Point] = []
    extras: dict[str, Any] = {}
    tokenizer_client = build_embedder(settings, buckets=params.buckets)
    token_counts = {
        length: float(np.mean([len(t) for t in tokenizer_client.tokenize(texts[length][:500], kind_of(length))]))
        for length in params.lengths
    }
    int8_file = settings.model_repository / INT8_MODEL / "1" / "model.onnx"
    int8 = params.int8 and int8_file.is_file()

    triton_needed = any(s in params.setups for s in TRITON_SETUPS) or params.queue_delays_us or int8
    if triton_needed:
        if int8:
            settings.triton_extra_models = (INT8_MODEL,)
        triton.start(StackConfig.of(settings))
        try:
            async with build_embedder(settings, timeout_s=120.0, buckets=params.buckets) as embedder:
                base = await configure(embedder, params.threads, params.queue_delay_us)
                if "triton_dynamic" in params.setups:
                    points += await triton_points(embedder, "triton_dynamic", texts, params, params.concurrencies)
                if params.queue_delays_us and "short" in params.lengths:
                    sweep = []
                    for delay in params.queue_delays_us:
                        await configure(embedder, params.threads, delay, base)
                        short_only = BenchParams(**{**asdict(params), "lengths": ("short",)})
                        (p,) = await triton_points(embedder, "triton_dynamic", texts, short_only, [REPORT_CONCURRENCY])
                        sweep.append({"max_queue_delay_us": delay, **asdict(p)})
                    extras["queue_delay_sweep"] = sweep
                if "triton_no_batching" in params.setups:
                    await configure(embedder, params.threads, None, base)
                    points += await triton_points(embedder, "triton_no_batching", texts, params, params.concurrencies)
                await configure(embedder, params.threads, params.queue_delay_us, base)
            if int8:
                async with build_embedder(
                    settings, model=INT8_MODEL, timeout_s=120.0, buckets=params.buckets
                ) as int8_embedder:
                    await configure(int8_embedder, params.threads, params.queue_delay_us)
                    points += await triton_points(
                        int8_embedder, "triton_dynamic_int8", texts, params, [REPORT_CONCURRENCY]
                    )
        finally:
            triton.stop(StackConfig.of(settings))

    if "naive" in params.setups:
        port = params.port_base + 3 if params.port_base else processes.free_port()
        try:
            start_naive(params, port)
            points += await naive_points(texts, params, port)
        finally:
            processes.stop_service(params.data_dir.resolve() / "run", NAIVE_NAME)

    if "ceiling" in params.setups:
        model_file = settings.model_repository / MODEL / "1" / "model.onnx"
        ceiling, curves = ceiling_points(tokenizer_client, model_file, "ceiling", texts, params)
        points += ceiling
        extras["ceiling_seq_per_s_by_batch"] = curves
        if int8:
            ceiling8, curves8 = ceiling_points(tokenizer_client, int8_file, "ceiling_int8", texts, params)
            points += ceiling8
            extras["ceiling_int8_seq_per_s_by_batch"] = curves8

    machine["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    report = build_report(points, params, machine, token_counts)
    report.update(extras)
    return report


def headline(points: Sequence[Point], setup: str, length: str = "short") -> Point | None:
    """The point of `setup` at `length` and REPORT_CONCURRENCY (the ceiling has one point per length)."""
    for p in points:
        if (
            p.setup == setup
            and p.length == length
            and (p.setup.startswith("ceiling") or p.concurrency == REPORT_CONCURRENCY)
        ):
            return p
    return None


def build_report(
    points: Sequence[Point], params: BenchParams, machine: dict[str, Any], token_counts: dict[str, float]
) -> dict[str, Any]:
    """The JSON report: headline setups (short, concurrency 32), target ratios, the sweep, machine and params."""
    setups = {}
    for name in ("triton_dynamic", "triton_no_batching", "naive", "ceiling", "triton_dynamic_int8", "ceiling_int8"):
        p = headline(points, name)
        if p is not None:
            setups[name] = {
                "rps": round(p.rps, 1),
                "seq_per_s": round(p.seq_per_s, 1),
                "p50_ms": round(p.p50_ms, 2),
                "p95_ms": round(p.p95_ms, 2),
                "p99_ms": round(p.p99_ms, 2),
                "n": p.n,
                "mean_batch": round(p.mean_batch, 2),
            }

    def ratio(a: str, b: str, length: str = "short") -> float | None:
        pa, pb = headline(points, a, length), headline(points, b, length)
        return round(pa.seq_per_s / pb.seq_per_s, 3) if pa and pb and pb.seq_per_s else None

    dynamic = headline(points, "triton_dynamic")
    targets = {
        "dynamic_over_ceiling": {"value": ratio("triton_dynamic", "ceiling"), "target": ">= 0.9"},
        "dynamic_over_naive": {"value": ratio("triton_dynamic", "naive"), "target": ">= 3"},
        "dynamic_over_no_batching": {"value": ratio("triton_dynamic", "triton_no_batching"), "target": None},
        "dynamic_p99_ms": {"value": round(dynamic.p99_ms, 1) if dynamic else None, "target": "< 100"},
        "int8_over_fp32_triton": {
            "value": ratio("triton_dynamic_int8", "triton_dynamic"),
            "value_abstract": ratio("triton_dynamic_int8", "triton_dynamic", "abstract"),
            "target": ">= 1.5",
        },
        "int8_over_fp32_in_process": {
            "value": ratio("ceiling_int8", "ceiling"),
            "value_abstract": ratio("ceiling_int8", "ceiling", "abstract"),
            "target": ">= 1.5",
        },
    }
    params_json = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(params).items()}
    params_json["model"] = MODEL
    params_json["mean_tokens"] = {k: round(v, 1) for k, v in token_counts.items()}
    params_json["client_buckets"] = (
        list(params.buckets) if params.buckets else length_buckets(get_spec(MODEL).max_tokens)
    )
    params_json["headline"] = f"short queries, concurrency {REPORT_CONCURRENCY}"
    return {
        "setups": setups,
        "targets": targets,
        "sweep": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(p).items()} for p in points],
        "machine": machine,
        "params": params_json,
    }


def write_plot(report: dict[str, Any], path: Path) -> Path:
    """Throughput (requests/s) and p95 latency vs concurrency, one line per setup, one row per text length.

    The in-process ceiling has no concurrency: it is drawn as a dashed horizontal line at its best throughput.
    """
    sweep = report["sweep"]
    lengths = list(dict.fromkeys(p["length"] for p in sweep))
    fig, axes = pyplot().subplots(len(lengths), 2, figsize=(11, 4 * len(lengths)), squeeze=False)
    for row, length in enumerate(lengths):
        ax_tp, ax_lat = axes[row]
        for setup in dict.fromkeys(p["setup"] for p in sweep):
            pts = sorted(
                (p for p in sweep if p["setup"] == setup and p["length"] == length), key=lambda p: p["concurrency"]
            )
            if not pts:
                continue
            if setup.startswith("ceiling"):
                ax_tp.axhline(
                    pts[0]["seq_per_s"],
                    linestyle="--",
                    color="grey" if setup == "ceiling" else "black",
                    label=f"{setup} (batch {pts[0]['concurrency']})",
                )
                continue
            xs = [p["concurrency"] for p in pts]
            ax_tp.plot(xs, [p["rps"] for p in pts], marker="o", label=setup)
            ax_lat.plot(xs, [p["p95_ms"] for p in pts], marker="o", label=setup)
        mean_tokens = report["params"]["mean_tokens"].get(length)
        for ax, ylabel in ((ax_tp, "throughput (requests/s)"), (ax_lat, "p95 latency (ms)")):
            concurrency_axis(ax, report["params"]["concurrencies"], ylabel, "concurrency (requests in flight)")
            ax.set_title(f"{length} texts (~{mean_tokens} tokens)")
        ax_lat.set_yscale("log")
        ax_tp.legend(fontsize=8)
        ax_lat.legend(fontsize=8)
    m = report["machine"]
    title = (
        f"{report['params']['model']} on {m['cores']} cores ({m['cpu']}), {m['model_threads']} model threads, "
        f"{m['date_utc'][:10]}"
    )
    return save_figure(fig, path, title)


def render(report: dict[str, Any], console: Any) -> None:
    """Print the sweep, the queue-delay sweep (if any) and the target ratios as Rich tables."""
    from rich.table import Table

    m = report["machine"]
    table = Table(
        title=f"rag bench embedder: {report['params']['model']}, {m['cores']} cores ({m['cpu']}), "
        f"{m['model_threads']} model threads, load avg {m['load_average_1m_at_start']} -> "
        f"{m['load_average_1m_at_end']}, {m['date_utc']}"
    )
    for col in ("setup", "length", "C / batch", "n", "req/s", "seq/s", "p50 ms", "p95 ms", "p99 ms", "mean batch"):
        table.add_column(col, justify="left" if col in ("setup", "length") else "right")
    for p in report["sweep"]:
        table.add_row(
            p["setup"],
            p["length"],
            str(p["concurrency"]),
            str(p["n"]),
            f"{p['rps']:.1f}",
            f"{p['seq_per_s']:.1f}",
            f"{p['p50_ms']:.1f}",
            f"{p['p95_ms']:.1f}",
            f"{p['p99_ms']:.1f}",
            f"{p['mean_batch']:.2f}",
        )
    console.print(table)
    if report.get("queue_delay_sweep"):
        delays = Table(title=f"triton_dynamic, short, concurrency {REPORT_CONCURRENCY}: max_queue_delay_microseconds")
        for col in ("delay us", "n", "req/s", "p50 ms", "p95 ms", "p99 ms", "mean batch"):
            delays.add_column(col, justify="right")
        for d in report["queue_delay_sweep"]:
            delays.add_row(
                str(d["max_queue_delay_us"]),
                str(d["n"]),
                f"{d['rps']:.1f}",
                f"{d['p50_ms']:.1f}",
                f"{d['p95_ms']:.1f}",
                f"{d['p99_ms']:.1f}",
                f"{d['mean_batch']:.2f}",
            )
        console.print(delays)
    targets = Table(title=f"targets ({report['params']['headline']}; ratios of throughput from this one run)")
    for col in ("figure", "value", "abstracts", "target"):
        targets.add_column(col)
    for name, t in report["targets"].items():
        targets.add_row(
            name,
            "-" if t["value"] is None else str(t["value"]),
            str(t.get("value_abstract", "")),
            t["target"] or "",
        )
    console.print(targets)


def run_bench_command(params: BenchParams, as_json: bool, plot: Path, output: Path | None) -> dict[str, Any]:
    """`rag bench embedder`: run, write the plot (and the JSON report to `output`), print table or JSON."""
    report = asyncio.run(run_benchmark(params))
    report["plot"] = str(write_plot(report, plot))
    emit_report(report, as_json, output, render)
    return report
