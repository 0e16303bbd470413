"""`rag bench embedder --profile`: the serving configurations of `evals.bench_embedder.profile` measured at one
point (short queries, concurrency 32) on a Triton started here, alternating, each with its latency split; the
table of medians and the JSON report."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evals.bench_embedder.load import load_texts
from evals.bench_embedder.params import REPORT_CONCURRENCY, BenchParams
from evals.bench_embedder.profile import Variant, backend_overhead, in_process_ms, profile_point, variant_config
from evals.bench_embedder.triton_setup import bench_settings
from evals.machine import machine_info
from evals.plots import emit_report
from evals.repeats import rotation, spread

DEFAULT_VARIANTS = (
    Variant(instances=2, threads=1, max_in_flight=16),
    Variant(instances=2, threads=1, queue_delay_us=None, max_in_flight=16),
    Variant(instances=2, threads=1),
    Variant(instances=2, threads=1, max_in_flight=32),
    Variant(),
    Variant(max_in_flight=32),
)
"""The configurations `rag bench embedder --profile` compares: the shipped one first (the questions' model at 2
instances x 1 thread, `TRITON_MAX_IN_FLIGHT` 16), the same without dynamic batching, then the client's in-flight
limit at 8 and 32, and one instance of 2 threads."""

SPLIT = ("client_prepare_ms", "slot_wait_ms", "triton_queue_ms", "triton_compute_ms", "grpc_and_client_ms")


async def run_profile(
    params: BenchParams, texts: Sequence[str], variants: Sequence[Variant] = DEFAULT_VARIANTS
) -> dict[str, Any]:
    """Profile `variants` at short queries / concurrency 32, `params.requests` requests each, `params.repeats`
    rounds with the variants rotated per round, on a Triton this function starts and stops.

    Returns:
        `{"variants": [{"variant", "label", "runs", "summary"}], "in_process_ms": {threads: {batch: ms}}}`; each
        run is `profile_point`'s dict plus `backend_overhead` (against the in-process run with the variant's
        threads per instance), each summary the medians (with spread of rps and p99).
    """
    from agent.core.app import build_embedder
    from infra import triton
    from infra.config import StackConfig

    settings = bench_settings(params)
    config = StackConfig.of(settings)
    pid = triton.start(config)
    results: list[dict[str, Any]] = [{"variant": asdict(v), "label": v.label, "runs": []} for v in variants]
    try:
        async with build_embedder(settings, timeout_s=120.0) as admin:
            base = await admin.model_config()
            model_file = settings.model_repository / admin.model_name / "1" / "model.onnx"
            order = list(range(len(variants)))
            for round_index in range(params.repeats):
                for i in rotation(order, round_index):
                    variant = variants[i]
                    await admin.load_model(config=variant_config(base, variant))
                    async with build_embedder(settings, timeout_s=120.0, max_in_flight=variant.max_in_flight) as emb:
                        run = await profile_point(
                            emb,
                            settings.triton_grpc_url,
                            texts,
                            params.requests,
                            REPORT_CONCURRENCY,
                            pid,
                            params.max_seconds_per_point,
                        )
                    run["round"] = round_index
                    results[i]["runs"].append(run)
            await admin.load_model(config=base)
    finally:
        triton.stop(config)
    sizes = sorted({int(s) for r in results for run in r["runs"] for s in run["server"]["per_batch"]})
    ort_ms = {t: in_process_ms(model_file, t, sizes or [1]) for t in sorted({v.threads for v in variants})}
    for variant, result in zip(variants, results, strict=True):
        for run in result["runs"]:
            run["backend_overhead"] = backend_overhead(run["server"], ort_ms[variant.threads])
        result["summary"] = summarize_runs(result["runs"])
    return {"variants": results, "in_process_ms": ort_ms}


def summarize_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of one variant: rps and p99 with their spread, mean batch, each part of the split
    (ms), the backend's per-execution overhead over all batch sizes (ms, executions weighted) and the cores used."""
    out: dict[str, Any] = {
        "rps": spread([r["point"]["rps"] for r in runs]).as_dict(1),
        "p99_ms": spread([r["point"]["p99_ms"] for r in runs]).as_dict(1),
        "mean_batch": round(spread([r["server"]["mean_batch"] for r in runs]).median, 2),
    }
    for key in (*SPLIT, "mean_latency_ms", "client_cpu_cores", "server_cpu_cores"):
        out[key] = round(spread([r[key] for r in runs]).median, 2)
    overheads = []
    for r in runs:
        per = r.get("backend_overhead", {}).values()
        executions = sum(e["executions"] for e in per)
        if executions:
            overheads.append(sum(e["overhead_ms"] * e["executions"] for e in per) / executions)
    out["backend_overhead_ms"] = round(spread(overheads).median, 2) if overheads else None
    return out


def render_profile(report: dict[str, Any], console: Any) -> None:
    """The variants' medians and latency split as a Rich table."""
    from rich.table import Table

    m = report["machine"]
    table = Table(
        title=f"rag bench embedder --profile: short queries, concurrency {REPORT_CONCURRENCY}, "
        f"{report['params']['requests']} requests x {report['params']['repeats']} rounds; {m['cores']} cores, "
        f"load avg {m['load_average_1m_at_start']} -> {m['load_average_1m_at_end']}, {m['date_utc']}"
    )
    columns = ("configuration", "req/s", "p99 ms", "batch", *SPLIT, "backend ms/exec", "server cores")
    for col in columns:
        table.add_column(col.removesuffix("_ms"), justify="left" if col == "configuration" else "right")
    for v in report["variants"]:
        s = v["summary"]
        rps, p99 = s["rps"], s["p99_ms"]
        table.add_row(
            v["label"],
            f"{rps['median']} ({rps['low']}–{rps['high']})",
            f"{p99['median']} ({p99['low']}–{p99['high']})",
            str(s["mean_batch"]),
            *(str(s[k]) for k in SPLIT),
            str(s["backend_overhead_ms"]),
            str(s["server_cpu_cores"]),
        )
    console.print(table)


def run_profile_command(params: BenchParams, as_json: bool, output: Path | None) -> dict[str, Any]:
    """`rag bench embedder --profile`: run, then print the table (or the JSON) and write `output` if given."""
    machine = machine_info({"model_threads": params.threads})
    report = asyncio.run(run_profile(params, load_texts()["short"]))
    machine["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    report["machine"] = machine
    report["params"] = {"requests": params.requests, "repeats": params.repeats, "concurrency": REPORT_CONCURRENCY}
    emit_report(report, as_json, output, render_profile)
    return report
