"""One `rag bench embedder` run: the requested setups in turn, each server started and stopped here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from agent.core.app import build_embedder
from evals.bench_embedder.ceiling import ceiling_points
from evals.bench_embedder.load import kind_of, load_texts
from evals.bench_embedder.naive import NAIVE_NAME, naive_points, start_naive
from evals.bench_embedder.params import INT8_MODEL, MODEL, REPORT_CONCURRENCY, BenchParams, Point
from evals.bench_embedder.render import render, write_plot
from evals.bench_embedder.replicas import SETUP as REPLICA_SETUP
from evals.bench_embedder.replicas import replica_point
from evals.bench_embedder.report import build_report, replica_target
from evals.bench_embedder.triton_setup import TRITON_SETUPS, bench_settings, configure, triton_points
from evals.machine import machine_info
from evals.plots import emit_report
from evals.repeats import rotation
from infra import processes, triton
from infra.config import StackConfig

log = logging.getLogger(__name__)


async def run_benchmark(params: BenchParams) -> dict[str, Any]:
    """Run every requested setup `params.repeats` times, alternating, and return the report (`rag bench embedder
    --json`).

    The servers (one Triton, the naive server) are started once and stay up; each round measures every setup's
    points in the round's rotated order (`evals.repeats.rotation`), so slow phases of a shared machine fall on
    different setups in different rounds. The queue-delay sweep and the replica setup run once, after the rounds.
    """
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
    model_file = settings.model_repository / MODEL / "1" / "model.onnx"
    int8 = params.int8 and int8_file.is_file()
    triton_needed = any(s in params.setups for s in TRITON_SETUPS) or params.queue_delays_us or int8
    round_setups: list[str] = [
        s for s in ("triton_dynamic", "triton_no_batching", "naive", "ceiling") if s in params.setups
    ]
    if int8:
        round_setups.append("triton_dynamic_int8")
        if "ceiling" in params.setups:
            round_setups.append("ceiling_int8")
    if triton_needed and int8:
        settings.triton_extra_models = (INT8_MODEL,)
    naive_port = (
        (params.port_base + 3 if params.port_base else processes.free_port()) if "naive" in params.setups else 0
    )

    async with contextlib.AsyncExitStack() as stack:
        triton_pid = None
        embedder = int8_embedder = None
        base: dict[str, Any] = {}
        if triton_needed:
            triton_pid = triton.start(StackConfig.of(settings))
            stack.callback(triton.stop, StackConfig.of(settings))
            embedder = await stack.enter_async_context(
                build_embedder(settings, timeout_s=120.0, buckets=params.buckets, max_in_flight=params.max_in_flight)
            )
            base = await embedder.model_config()
            if int8:
                int8_embedder = await stack.enter_async_context(
                    build_embedder(
                        settings,
                        model=INT8_MODEL,
                        timeout_s=120.0,
                        buckets=params.buckets,
                        max_in_flight=params.max_in_flight,
                    )
                )
                await configure(int8_embedder, params.threads, params.queue_delay_us)
        if naive_port:
            stack.callback(processes.stop_service, params.data_dir.resolve() / "run", NAIVE_NAME)
            start_naive(params, naive_port)

        async def measure(setup: str) -> list[Point]:
            if setup in TRITON_SETUPS:
                assert embedder is not None
                delay = params.queue_delay_us if setup == "triton_dynamic" else None
                await configure(embedder, params.threads, delay, base)
                return await triton_points(embedder, setup, texts, params, params.concurrencies, triton_pid)
            if setup == "triton_dynamic_int8":
                assert int8_embedder is not None
                return await triton_points(int8_embedder, setup, texts, params, [REPORT_CONCURRENCY])
            if setup == "naive":
                return await naive_points(texts, params, naive_port)
            ceiling, curves = ceiling_points(
                tokenizer_client, int8_file if setup == "ceiling_int8" else model_file, setup, texts, params
            )
            extras.setdefault(f"{setup}_seq_per_s_by_batch", curves)  # the first round's; every round's below
            extras.setdefault(f"{setup}_seq_per_s_by_batch_rounds", []).append(curves)
            return ceiling

        for round_index in range(params.repeats):
            for setup in rotation(round_setups, round_index):
                log.info("round %d: %s", round_index + 1, setup)
                for point in await measure(setup):
                    point.round = round_index
                    points.append(point)

        if embedder is not None and params.queue_delays_us and "short" in params.lengths:
            sweep = []
            for delay in params.queue_delays_us:
                await configure(embedder, params.threads, delay, base)
                short_only = BenchParams(**{**asdict(params), "lengths": ("short",)})
                (p,) = await triton_points(embedder, "triton_dynamic", texts, short_only, [REPORT_CONCURRENCY])
                sweep.append({"max_queue_delay_us": delay, **asdict(p)})
            extras["queue_delay_sweep"] = sweep
        if embedder is not None:
            await embedder.load_model(config=base)

    if REPLICA_SETUP in params.setups and "short" in params.lengths:
        point, extras["replicas"] = await replica_point(texts["short"], params, settings)
        points.append(point)

    machine["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    report = build_report(points, params, machine, token_counts)
    report.update(extras)
    if "replicas" in extras:
        report["targets"]["replica_share"] = replica_target(extras["replicas"])
    return report


def run_bench_command(params: BenchParams, as_json: bool, plot: Path, output: Path | None) -> dict[str, Any]:
    """`rag bench embedder`: run, write the plot (and the JSON report to `output`), print table or JSON."""
    report = asyncio.run(run_benchmark(params))
    report["plot"] = str(write_plot(report, plot))
    emit_report(report, as_json, output, render)
    return report
