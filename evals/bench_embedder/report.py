"""The JSON report of `rag bench embedder`: headline setups, target ratios, the sweep, machine and parameters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evals.bench_embedder.params import MODEL, REPORT_CONCURRENCY, BenchParams, Point
from evals.repeats import judged, spread
from tools.embedder import length_buckets
from tools.model_specs import get_spec


def headline(
    points: Sequence[Point], setup: str, length: str = "short", round_index: int | None = None
) -> Point | None:
    """The point of `setup` at `length` and REPORT_CONCURRENCY (the ceiling has one point per length) in round
    `round_index` (None: the first found)."""
    for p in headlines(points, setup, length):
        if round_index is None or p.round == round_index:
            return p
    return None


def headlines(points: Sequence[Point], setup: str, length: str = "short") -> list[Point]:
    """The headline point of `setup` at `length` of every round, in round order."""
    found = [
        p
        for p in points
        if p.setup == setup
        and p.length == length
        and (p.setup.startswith("ceiling") or p.concurrency == REPORT_CONCURRENCY)
    ]
    return sorted(found, key=lambda p: p.round)


def round_ratios(points: Sequence[Point], a: str, b: str, length: str = "short") -> list[float]:
    """seq/s of `a` over `b` at their headline points, one ratio per round in which both were measured."""
    out = []
    for pa in headlines(points, a, length):
        pb = headline(points, b, length, pa.round)
        if pb is not None and pb.seq_per_s:
            out.append(pa.seq_per_s / pb.seq_per_s)
    return out


def _setup_summary(runs: Sequence[Point]) -> dict[str, Any]:
    """A setup's headline figures: the median over its rounds of each, the spread of req/s, p99 and their runs."""

    def median(values: Sequence[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return spread(known).median if known else None

    summary: dict[str, Any] = {}
    for key in ("rps", "seq_per_s", "p50_ms", "p95_ms", "p99_ms", "mean_batch", "client_cpu_cores", "server_cpu_cores"):
        value = median([getattr(p, key) for p in runs])
        summary[key] = None if value is None else round(value, 2 if key != "rps" and key != "seq_per_s" else 1)
    summary["n"] = int(spread([p.n for p in runs]).median)
    summary["runs"] = len(runs)
    summary["rps_spread"] = spread([p.rps for p in runs]).as_dict(1)
    summary["p99_ms_spread"] = spread([p.p99_ms for p in runs]).as_dict(1)
    return summary


def build_report(
    points: Sequence[Point], params: BenchParams, machine: dict[str, Any], token_counts: dict[str, float]
) -> dict[str, Any]:
    """The JSON report: headline setups (short, concurrency 32: medians over the rounds with the spread), each
    target as the median of its per-round values with their spread and verdict (`evals.repeats.judged`), every
    point of every round (`sweep`), machine and params."""
    setups = {}
    names = ("triton_dynamic", "triton_no_batching", "naive", "ceiling", "triton_dynamic_int8", "ceiling_int8")
    for name in (*names, "triton_replicas"):
        runs = headlines(points, name)
        if runs:
            setups[name] = _setup_summary(runs)

    def ratio(a: str, b: str, target: str | None, length: str = "short") -> dict[str, Any]:
        return judged(round_ratios(points, a, b, length), target)

    p99s = [p.p99_ms for p in headlines(points, "triton_dynamic")]
    targets = {
        "dynamic_over_ceiling": ratio("triton_dynamic", "ceiling", ">= 0.85"),
        "dynamic_over_naive": ratio("triton_dynamic", "naive", ">= 3"),
        "dynamic_over_no_batching": ratio("triton_dynamic", "triton_no_batching", ">= 1.2"),
        "dynamic_p99_ms": judged(p99s, "< 100", digits=1),
    }
    for key, a, b in (
        ("int8_over_fp32_triton", "triton_dynamic_int8", "triton_dynamic"),
        ("int8_over_fp32_in_process", "ceiling_int8", "ceiling"),
    ):
        short, abstract = ratio(a, b, ">= 1.5"), ratio(a, b, ">= 1.5", "abstract")
        targets[key] = {**short, "value_abstract": abstract["value"], "verdict_abstract": abstract["verdict"]}
    params_json = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(params).items()}
    params_json["model"] = MODEL
    params_json["mean_tokens"] = {k: round(v, 1) for k, v in token_counts.items()}
    params_json["client_buckets"] = (
        list(params.buckets) if params.buckets else length_buckets(get_spec(MODEL).max_tokens)
    )
    params_json["headline"] = (
        f"short queries, concurrency {REPORT_CONCURRENCY}; medians of {params.repeats} rounds, setups alternating"
    )
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
