"""The Triton setups of the embedder benchmark: the benchmark's own server settings, the model (re)configured per
setup through the model repository extension, and the sweep through the real client."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from agent.config.settings import Settings
from evals.bench_embedder.load import kind_of, measured_load, n_requests, run_load, summarize
from evals.bench_embedder.params import MODEL, BenchParams, Point
from infra import processes
from tools.embedder import TritonEmbedder
from tools.records import TextKind

log = logging.getLogger(__name__)

TRITON_SETUPS = ("triton_dynamic", "triton_no_batching")


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
    """(Re)load the embedder's model with its repository config, `threads` ORT intra-op threads in all (divided
    among the config's instances, at least one each) and the given batcher.

    `queue_delay_us=None` removes `dynamic_batching` (Triton then runs each request as it comes); otherwise the
    repository's `dynamic_batching` (queue policy included) is kept with `max_queue_delay_microseconds` replaced.
    Uses the model repository extension's config override (`TritonEmbedder.load_model`); returns the base config.
    """
    if base is None:
        base = await embedder.model_config()
    config = json.loads(json.dumps(base))
    instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1
    config["parameters"] = {
        "intra_op_thread_count": {"string_value": str(max(1, threads // instances))},
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
    server_pid: int | None = None,
) -> list[Point]:
    """Sweep lengths x `concurrencies` through the Triton client; mean batch from the server statistics, CPU use of
    this process and of `server_pid`'s process tree (Triton and its model processes) per point."""
    points = []
    for length in params.lengths:
        kind = kind_of(length)

        async def call(text: str, kind: TextKind = kind) -> object:
            return await embedder.embed([text], kind)

        for concurrency in concurrencies:
            await run_load(call, texts[length], min(8, concurrency), concurrency, 10.0)  # warm-up
            before = await server_counts(embedder)
            latencies, wall, client_cpu, server_cpu = await measured_load(
                call, texts[length], n_requests(params, length), concurrency, params.max_seconds_per_point, server_pid
            )
            after = await server_counts(embedder)
            point = summarize(setup, length, concurrency, latencies, wall)
            point.client_cpu_cores, point.server_cpu_cores = client_cpu, server_cpu
            executions = after[1] - before[1]
            point.mean_batch = (after[0] - before[0]) / executions if executions else 0.0
            log.info("%s", point)
            points.append(point)
    return points
