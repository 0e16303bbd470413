"""The JSON report of `rag bench embedder`: headline setups, target ratios, the sweep, machine and parameters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evals.bench_embedder.params import MODEL, REPORT_CONCURRENCY, BenchParams, Point
from tools.embedder import length_buckets
from tools.model_specs import get_spec


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
    names = ("triton_dynamic", "triton_no_batching", "naive", "ceiling", "triton_dynamic_int8", "ceiling_int8")
    for name in (*names, "triton_replicas"):
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
                "client_cpu_cores": None if p.client_cpu_cores is None else round(p.client_cpu_cores, 2),
                "server_cpu_cores": None if p.server_cpu_cores is None else round(p.server_cpu_cores, 2),
            }

    def ratio(a: str, b: str, length: str = "short") -> float | None:
        pa, pb = headline(points, a, length), headline(points, b, length)
        return round(pa.seq_per_s / pb.seq_per_s, 3) if pa and pb and pb.seq_per_s else None

    dynamic = headline(points, "triton_dynamic")
    targets = {
        "dynamic_over_ceiling": {"value": ratio("triton_dynamic", "ceiling"), "target": ">= 0.85"},
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


def replica_target(replicas: dict[str, Any]) -> dict[str, Any]:
    """The replica share against its target (issue 16: with two Tritons each serves 35-65 % at concurrency 32):
    the smallest and largest share of `replicas` (`evals.bench_embedder.replicas.replica_point`)."""
    shares = [s for s in replicas["share"] if s is not None]
    return {
        "value": min(shares) if shares else None,
        "value_max": max(shares) if shares else None,
        "target": ">= 0.35",
        "target_max": "<= 0.65",
    }
