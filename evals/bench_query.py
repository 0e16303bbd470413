"""`rag bench query`: the query path (embed on Triton + search in Postgres) through the app's own clients
(`agent.core.wiring.Clients`), as the user runs it.

What is measured, with the SHIPPED settings (`Settings()`: the running local stack, or whatever the environment
points at):

- For each retrieval mode (`dense`, `full_text`, `hybrid`; one `Retriever` per mode from
  `agent.core.wiring.build_retriever` over the app's own embedder and store) and each concurrency C: N SciFact test
  claims (cycled) searched with at most C in flight. Per point: queries/s, end-to-end latency p50/p95/p99 with n, the
  p50 of the result's `embed` and `search` stage timings, and Triton's mean batch for the point (the difference of
  `TritonEmbedder.inference_statistics()` before and after: inferences / executions).
- Embed-only throughput at each C with the same client (`app.embedder.embed([claim], kind="query")`), so the
  query path can be read as a ratio of what the embedder alone sustains.
- With `--scale N`: a second database on the same Postgres server holding the stored chunks N times (replica 0
  is the stored corpus, replicas 1..N-1 the same texts under doc ids `{doc_id}~r{i}` with jittered, re-normalised
  vectors), written through `VectorStore.add_documents` so whatever statistics the store maintains are built; each
  leg's search p50 at concurrency 1 at 1x and Nx, and the growth Nx / 1x. An existing scaled database with the
  expected chunk count is reused (`--rebuild-scale` forces a rebuild).
- With `--filter-selectivity 0.01,0.001` (the filtered mode, instead of the sweep): recall@10 of metadata-filtered
  search against the exact filtered search and filtered vs unfiltered p50, per leg, on a tagged copy of the stored
  corpus (`evals.bench_filters`).

Percentiles: `tools.stats.percentiles` (numpy, linear interpolation). Progress goes to stderr; `--json` prints
one JSON object on stdout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_fixed

from agent.config.settings import Settings
from agent.core.wiring import Clients, build_retriever, build_store
from evals.bench_corpus import scaled_database_name, stored_pages
from evals.bench_embedder import run_load
from evals.bench_query_rounds import merge_embed_only, merge_points, query_targets
from evals.machine import machine_info
from evals.plots import concurrency_axis, emit_report, pyplot, save_figure
from evals.repeats import rotation
from evals.retrieval_eval import ensure_database
from evals.scifact import claim_texts
from tools.access import caller_access
from tools.records import ChunkRecord, DocumentRecord
from tools.retrieval import Retriever
from tools.retrieval_config import RETRIEVAL_MODES, RetrievalMode
from tools.scope import SearchScope
from tools.stats import percentiles
from tools.store import VectorStore

log = logging.getLogger(__name__)

MODES: tuple[RetrievalMode, ...] = RETRIEVAL_MODES
JITTER_SIGMA = 0.01
"""Standard deviation of the Gaussian noise added to each coordinate of a replica's unit vector (then
re-normalised): replicas stay near their original (cosine ~0.98 for dim 384) without being exact duplicates."""


@dataclass
class QueryBenchParams:
    """What one `rag bench query` run does.

    Attributes:
        requests: queries per (mode, concurrency) point and per embed-only point (SciFact test claims, cycled).
        concurrencies: queries in flight, swept.
        modes: retrieval modes to measure.
        top_k: passages per query (None: `TOP_K`).
        scale: build/reuse an N-times database and report each leg's search p50 growth (None: no scale run).
        rebuild_scale: drop and rebuild the scaled (or filtered) database even when it is complete.
        filter_selectivities: the filtered mode (`evals.bench_filters`) at these shares of chunks matching, e.g.
            (0.01, 0.001); empty: the sweep.
        max_seconds_per_point: stop issuing queries of one point after this many seconds.
        repeats: rounds; per concurrency, each round measures embed-only and every mode (and every mode as the
            restricted caller, with `access_groups`) in a rotated order (`evals.repeats.rotation`); the report
            gives the medians with their spread (`evals.bench_query_rounds`).
        access_groups: also search as a caller in these groups (`tools.access.caller_access`: the scope read by
            them, Postgres row-level security in the store) and report restricted / unrestricted p50 latency;
            empty: unrestricted only.
    """

    requests: int = 300
    concurrencies: tuple[int, ...] = (1, 8, 32, 64)
    modes: tuple[RetrievalMode, ...] = MODES
    top_k: int | None = None
    scale: int | None = None
    rebuild_scale: bool = False
    max_seconds_per_point: float = 120.0
    filter_selectivities: tuple[float, ...] = ()
    repeats: int = 3
    access_groups: tuple[str, ...] = ()


def load_claims() -> list[str]:
    """The SciFact test claims, in file order."""
    return [text for text in claim_texts("test").values() if text.strip()]


def retrievers(app: Clients, store: VectorStore, modes: Sequence[RetrievalMode]) -> dict[str, Retriever]:
    """One Retriever per mode over the app's embedder and `store`, from the app's settings."""
    return {
        mode: build_retriever(app.embedder, store, app.settings.model_copy(update={"retrieval_mode": mode}))
        for mode in modes
    }


async def measure_point(
    app: Clients,
    retriever: Retriever,
    claims: Sequence[str],
    params: QueryBenchParams,
    concurrency: int,
    scope: SearchScope | None = None,
) -> dict[str, Any]:
    """One (mode, concurrency) point: qps, latency percentiles (ms), stage p50s and Triton's mean batch; the
    searches read `scope` (None: everything, unrestricted)."""
    top_k = params.top_k or app.settings.top_k
    timings: list[dict[str, float]] = []

    async def call(claim: str) -> object:
        result = await retriever.search(claim, top_k, scope)
        timings.append(result.timings_ms)
        return result

    await run_load(call, claims, min(8, concurrency), concurrency, 30.0)  # warm-up: connections, plans
    timings.clear()
    before = await app.embedder.inference_statistics()
    latencies_s, wall_s = await run_load(call, claims, params.requests, concurrency, params.max_seconds_per_point)
    after = await counted_statistics(app, before["inference_count"] + len(latencies_s))
    latency = percentiles(np.asarray(latencies_s) * 1000)
    executions = after["execution_count"] - before["execution_count"]
    return {
        "mode": retriever.config.mode,
        "concurrency": concurrency,
        "qps": round(len(latencies_s) / wall_s, 2),
        "p50_ms": round(float(latency["p50"]), 2),
        "p95_ms": round(float(latency["p95"]), 2),
        "p99_ms": round(float(latency["p99"]), 2),
        "n": int(latency["n"]),
        "embed_p50_ms": round(float(percentiles([t.get("embed", 0.0) for t in timings], (50,))["p50"]), 2),
        "search_p50_ms": round(float(percentiles([t.get("search", 0.0) for t in timings], (50,))["p50"]), 2),
        "mean_batch": round((after["inference_count"] - before["inference_count"]) / executions, 2)
        if executions
        else None,
    }


STATISTICS_WAIT_S = 10.0
"""Longest wait for Triton's statistics to count a point's requests, seconds."""


async def counted_statistics(app: Clients, inferences: float) -> dict[str, float]:
    """The embedder's Triton statistics once they count at least `inferences` inferences (Triton updates them after
    it has sent a response, so a read right after the last response can miss the last batch), or as they are after
    `STATISTICS_WAIT_S` seconds."""
    retrying = AsyncRetrying(
        stop=stop_after_delay(STATISTICS_WAIT_S),
        wait=wait_fixed(0.05),
        retry=retry_if_result(lambda counts: counts["inference_count"] < inferences),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else {},
    )
    stats: dict[str, float] = await retrying(app.embedder.inference_statistics)
    return stats


async def embed_only_point(
    app: Clients, claims: Sequence[str], params: QueryBenchParams, concurrency: int
) -> dict[str, Any]:
    """Queries/s of `app.embedder.embed([claim], kind="query")` alone at `concurrency`."""

    async def call(claim: str) -> object:
        return await app.embedder.embed([claim], kind="query")

    await run_load(call, claims, min(8, concurrency), concurrency, 30.0)
    latencies_s, wall_s = await run_load(call, claims, params.requests, concurrency, params.max_seconds_per_point)
    return {"concurrency": concurrency, "qps": round(len(latencies_s) / wall_s, 2)}


# --- the scaled database -----------------------------------------------------------------------------------------


def replicate(doc: DocumentRecord, replica: int, rng: np.random.Generator) -> DocumentRecord:
    """Replica `replica` of `doc`: 0 is `doc` itself; others get doc id `{doc_id}~r{replica}` and each chunk's
    `(dim,)` float32 vector plus N(0, JITTER_SIGMA^2) noise per coordinate, L2-normalised again."""
    if replica == 0:
        return doc
    chunks = []
    for c in doc.chunks:
        vector = c.embedding + rng.normal(0.0, JITTER_SIGMA, c.embedding.shape).astype(np.float32)
        chunks.append(ChunkRecord(c.chunk_index, c.text, c.token_count, vector / np.linalg.norm(vector)))
    return DocumentRecord(f"{doc.doc_id}~r{replica}", doc.title, doc.source, doc.content_hash, chunks, doc.metadata)


async def build_scaled_store(app: Clients, factor: int, rebuild: bool) -> tuple[str, int, int]:
    """Create (or reuse) the `factor`-times database; returns (its URL, chunks at 1x, chunks at Nx).

    Reused as is when it already holds `factor` x the stored chunks; a smaller one (an interrupted build) is
    completed (writes are idempotent by doc id and content hash); a larger one, or `rebuild`, is dropped first.

    Raises:
        ValueError: factor < 2 or nothing is stored at 1x.
        asyncpg.PostgresError: the server refused CREATE/DROP DATABASE.
    """
    if factor < 2:
        raise ValueError(f"--scale {factor}; expected >= 2")
    _, chunks_1x = await app.store.count()
    if chunks_1x == 0:
        raise ValueError("the store holds no chunks: ingest a corpus first (e.g. `rag ingest` of SciFact)")
    name = scaled_database_name(app.store.dsn, factor)
    expected = chunks_1x * factor
    url = await ensure_database(app.store.dsn, name)
    async with VectorStore(url, app.store.model_name, app.store.dim) as scaled:
        held = (await scaled.count())[1]
    if held == expected and not rebuild:
        log.info("reusing %s: %d chunks", name, held)
        return url, chunks_1x, held
    if rebuild or held > expected:
        conn = await asyncpg.connect(app.store.dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
        url = await ensure_database(app.store.dsn, name)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    async with VectorStore(url, app.store.model_name, app.store.dim) as scaled:
        async for page in stored_pages(app.store):
            for replica in range(factor):
                await scaled.add_documents([replicate(d, replica, rng) for d in page])
            log.info(
                "scaled store %s: %d chunks (%.0f s)", name, (await scaled.count())[1], time.perf_counter() - start
            )
        held = (await scaled.count())[1]
    if held != expected:
        raise ValueError(f"scaled database {name} holds {held} chunks; expected {expected} ({factor} x {chunks_1x})")
    return url, chunks_1x, held


async def scale_legs(
    app: Clients, claims: Sequence[str], params: QueryBenchParams, points: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Search p50 at concurrency 1 on the 1x and Nx stores per leg, and the growth Nx / 1x."""
    assert params.scale is not None
    url, chunks_1x, chunks_nx = await build_scaled_store(app, params.scale, params.rebuild_scale)
    one_x = {p["mode"]: p for p in points if p["concurrency"] == 1}
    legs: dict[str, dict[str, float | None]] = {}
    async with build_store(url, app.store.model_name, app.store.dim, app.settings) as scaled:
        scaled_retrievers = retrievers(app, scaled, MODES)
        base_retrievers = retrievers(app, app.store, MODES)
        for mode in MODES:
            base = one_x.get(mode) or await measure_point(app, base_retrievers[mode], claims, params, 1)
            grown = await measure_point(app, scaled_retrievers[mode], claims, params, 1)
            legs[mode] = {
                "p50_1x_ms": base["search_p50_ms"],
                "p50_nx_ms": grown["search_p50_ms"],
                "growth": round(grown["search_p50_ms"] / base["search_p50_ms"], 3) if base["search_p50_ms"] else None,
            }
            log.info("scale %s: %s", mode, legs[mode])
    return {"factor": params.scale, "chunks_1x": chunks_1x, "chunks_nx": chunks_nx, "legs": legs, "database": url}


# --- the run -----------------------------------------------------------------------------------------------------


async def run_query_bench(settings: Settings, params: QueryBenchParams) -> dict[str, Any]:
    """Run every point (and the scale legs when asked); returns the report of `rag bench query --json`."""
    claims = load_claims()
    machine = machine_info({"embedder_model": settings.embedder_model, "triton_grpc_url": settings.triton_grpc_url})
    points: list[dict[str, Any]] = []
    embed_only: list[dict[str, Any]] = []
    point_rounds: list[dict[str, Any]] = []
    embed_only_rounds: list[dict[str, Any]] = []
    restricted_rounds: list[dict[str, Any]] = []
    restricted_points: list[dict[str, Any]] = []
    filtered: dict[str, Any] | None = None
    async with Clients(settings) as app:
        docs, chunks = await app.store.count()
        if params.filter_selectivities:
            from evals.bench_filters import run_filtered

            filtered = await run_filtered(
                app, claims, params.filter_selectivities, params.requests, params.rebuild_scale
            )
        by_mode = retrievers(app, app.store, params.modes)
        scope = SearchScope().read_by(caller_access(params.access_groups)) if params.access_groups else None
        steps = ["embed_only", *params.modes, *(f"{m}@restricted" for m in params.modes if scope is not None)]
        for concurrency in () if filtered else params.concurrencies:
            for round_index in range(params.repeats):
                for step in rotation(steps, round_index):
                    mode, _, restricted = step.partition("@")
                    if step == "embed_only":
                        point = await embed_only_point(app, claims, params, concurrency)
                    else:
                        chosen = scope if restricted else None
                        point = await measure_point(app, by_mode[mode], claims, params, concurrency, chosen)
                    point["round"] = round_index
                    if step == "embed_only":
                        embed_only_rounds.append(point)
                    else:
                        (restricted_rounds if restricted else point_rounds).append(point)
                    log.info("round %d %s: %s", round_index + 1, step, point)
        points = merge_points(point_rounds, embed_only_rounds)
        embed_only = merge_embed_only(embed_only_rounds)
        restricted_points = merge_points(restricted_rounds, embed_only_rounds) if restricted_rounds else []
        scale = await scale_legs(app, claims, params, points) if params.scale and not filtered else None
    machine["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    settings_used = {
        k: getattr(settings, k)
        for k in ("triton_max_in_flight", "db_pool_max_size", "top_k", "retrieval_candidates", "hnsw_ef_search")
    }
    return {
        "points": points,
        "embed_only": embed_only,
        "targets": query_targets(point_rounds, embed_only_rounds, restricted_rounds),
        "restricted_points": restricted_points,
        "rounds": {"points": point_rounds, "embed_only": embed_only_rounds, "restricted": restricted_rounds},
        "scale": scale,
        "filtered": filtered,
        "machine": machine,
        "params": {
            **asdict(params),
            "top_k": params.top_k or settings.top_k,
            "stored_documents": docs,
            "stored_chunks": chunks,
            "claims": len(claims),
            "settings": settings_used,
        },
    }


def write_plot(report: dict[str, Any], path: Path) -> Path:
    """Queries/s and p99 latency against concurrency, one line per mode (embed-only throughput dashed)."""
    fig, (ax_qps, ax_p99) = pyplot().subplots(1, 2, figsize=(11, 4))
    points = report["points"]
    for mode in dict.fromkeys(p["mode"] for p in points):
        pts = sorted((p for p in points if p["mode"] == mode), key=lambda p: p["concurrency"])
        xs = [p["concurrency"] for p in pts]
        ax_qps.plot(xs, [p["qps"] for p in pts], marker="o", label=mode)
        ax_p99.plot(xs, [p["p99_ms"] for p in pts], marker="o", label=mode)
    embed = sorted(report["embed_only"], key=lambda p: p["concurrency"])
    ax_qps.plot([p["concurrency"] for p in embed], [p["qps"] for p in embed], "k--", label="embed only")
    for ax, ylabel in ((ax_qps, "queries/s"), (ax_p99, "p99 latency (ms)")):
        concurrency_axis(ax, report["params"]["concurrencies"], ylabel, "concurrency (queries in flight)")
        ax.legend(fontsize=8)
    m = report["machine"]
    title = (
        f"rag bench query: {report['params']['stored_chunks']} chunks, top {report['params']['top_k']}, "
        f"{m['cores']} cores ({m['cpu']}), {m['date_utc'][:10]}"
    )
    return save_figure(fig, path, title)


def _with_spread(value: float, spread: dict[str, Any] | None, digits: int) -> str:
    """`value (low–high)`, or the value alone for one round."""
    if not spread or len(spread["values"]) < 2:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} ({spread['low']:.{digits}f}–{spread['high']:.{digits}f})"


def _judged(entry: dict[str, Any]) -> str:
    """A judged figure (`evals.repeats.judged`) as `median (low–high)`, `-` when not measured."""
    if entry["value"] is None:
        return "-"
    return _with_spread(entry["value"], entry["spread"], 3)


def render(report: dict[str, Any], console: Any) -> None:
    """Print the points, the embed-only throughput and the scale legs as Rich tables."""
    from rich.table import Table

    m = report["machine"]
    table = Table(
        title=f"rag bench query: {report['params']['stored_chunks']} chunks, top {report['params']['top_k']}, "
        f"{m['cores']} cores, load avg {m['load_average_1m_at_start']} -> {m['load_average_1m_at_end']}, "
        f"{m['date_utc']}"
    )
    columns = ("mode", "C", "n", "q/s (low–high)", "x embed-only (low–high)", "p50 ms", "p95 ms", "p99 ms")
    for col in (*columns, "embed p50", "search p50", "mean batch"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    restricted = [{**p, "mode": f"{p['mode']} (restricted)"} for p in report.get("restricted_points", [])]
    for p in [*report["points"], *restricted]:
        ratio = p.get("embed_only_ratio_spread")
        table.add_row(
            p["mode"],
            str(p["concurrency"]),
            str(p["n"]),
            _with_spread(p["qps"], p.get("qps_spread"), 1),
            "-" if ratio is None else _with_spread(ratio["median"], ratio, 2),
            f"{p['p50_ms']:.1f}",
            f"{p['p95_ms']:.1f}",
            f"{p['p99_ms']:.1f}",
            f"{p['embed_p50_ms']:.1f}",
            f"{p['search_p50_ms']:.1f}",
            "-" if p["mean_batch"] is None else f"{p['mean_batch']:.2f}",
        )
    console.print(table)
    embed = Table(title="embed only: app.embedder.embed, one claim per call")
    embed.add_column("C", justify="right")
    embed.add_column("q/s (low–high)", justify="right")
    for p in report["embed_only"]:
        embed.add_row(str(p["concurrency"]), _with_spread(p["qps"], p.get("qps_spread"), 1))
    console.print(embed)
    targets = Table(title=f"targets: medians of {report['params']['repeats']} rounds (low–high), judged by every round")
    for col in ("figure", "value", "target", "verdict"):
        targets.add_column(col)
    for name, t in report.get("targets", {}).items():
        if name == "restricted_by_point":
            for point, entry in t.items():
                targets.add_row(
                    f"restricted / unrestricted p50, {point}", _judged(entry), entry["target"], str(entry["verdict"])
                )
            continue
        targets.add_row(name, _judged(t), str(t["target"]), str(t["verdict"]))
    console.print(targets)
    scale = report["scale"]
    if scale:
        legs = Table(
            title=f"search p50 at concurrency 1: {scale['chunks_1x']} chunks (1x) vs {scale['chunks_nx']} "
            f"({scale['factor']}x)"
        )
        for col in ("leg", "1x ms", f"{scale['factor']}x ms", "growth"):
            legs.add_column(col, justify="left" if col == "leg" else "right")
        for mode, leg in scale["legs"].items():
            legs.add_row(mode, f"{leg['p50_1x_ms']:.1f}", f"{leg['p50_nx_ms']:.1f}", str(leg["growth"]))
        console.print(legs)


def run_query_bench_command(
    params: QueryBenchParams, as_json: bool, plot: Path | None, output: Path | None
) -> dict[str, Any]:
    """`rag bench query`: run with `Settings()`, write the plot (default `DATA_DIR/bench/bench-query.png`, or
    `bench-query-filtered.png` in the filtered mode) and the JSON report to `output`, print the tables or
    (`as_json`) only the JSON object on stdout."""
    settings = Settings()
    for mode in params.modes:
        if mode not in MODES:
            raise ValueError(f"--mode {mode!r}; expected one of {', '.join(MODES)}")
    log.setLevel(logging.INFO)
    report = asyncio.run(run_query_bench(settings, params))
    if report["filtered"]:
        from evals.bench_filters import render_filtered, write_filtered_plot

        path = plot or settings.data_dir / "bench" / "bench-query-filtered.png"
        report["plot"] = str(write_filtered_plot(report, path))
        emit_report(report, as_json, output, render_filtered)
        return report
    report["plot"] = str(write_plot(report, plot or settings.data_dir / "bench" / "bench-query.png"))
    emit_report(report, as_json, output, render)
    return report
