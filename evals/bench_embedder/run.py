"""One `rag bench embedder` run: the requested setups in turn, each server started and stopped here."""

from __future__ import annotations

import asyncio
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
from infra import processes, triton
from infra.config import StackConfig


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
        triton_pid = triton.start(StackConfig.of(settings))
        try:
            async with build_embedder(settings, timeout_s=120.0, buckets=params.buckets) as embedder:
                base = await configure(embedder, params.threads, params.queue_delay_us)
                if "triton_dynamic" in params.setups:
                    points += await triton_points(
                        embedder, "triton_dynamic", texts, params, params.concurrencies, triton_pid
                    )
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
                    points += await triton_points(
                        embedder, "triton_no_batching", texts, params, params.concurrencies, triton_pid
                    )
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

    if REPLICA_SETUP in params.setups and "short" in params.lengths:
        point, extras["replicas"] = await replica_point(texts["short"], params, settings)
        points.append(point)

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
    if "replicas" in extras:
        report["targets"]["replica_share"] = replica_target(extras["replicas"])
    return report


def run_bench_command(params: BenchParams, as_json: bool, plot: Path, output: Path | None) -> dict[str, Any]:
    """`rag bench embedder`: run, write the plot (and the JSON report to `output`), print table or JSON."""
    report = asyncio.run(run_benchmark(params))
    report["plot"] = str(write_plot(report, plot))
    emit_report(report, as_json, output, render)
    return report
