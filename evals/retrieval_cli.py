"""`rag eval retrieval`: runs `evals.retrieval_eval` on SciFact (or any BEIR folder, `evals.beir`) and prints the
table (Rich) or JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import cast, get_args

import asyncpg
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from agent.config.settings import Settings
from evals.beir import load_beir
from evals.retrieval_eval import (
    REFERENCE_NDCG10,
    ProgressFn,
    RetrievalEvalReport,
    Variant,
    run_retrieval_eval,
    tune_fusion,
)
from evals.scifact import DatasetError, Split, load_corpus, load_qrels, load_queries
from tools.errors import EmbedderError, StoreError

METRIC_NAMES = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


def progress_bar(err: Console) -> tuple[Progress, ProgressFn]:
    """A Rich progress display on `err` (one bar per stage) and the `(stage, done, total)` callback feeding it."""
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err
    )
    tasks: dict[str, TaskID] = {}

    def advance(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done)

    return progress, advance


def render(report: RetrievalEvalReport, console: Console, dataset: str = "SciFact") -> None:
    """Print one table per variant, and for SciFact the reference nDCG@10 figures."""
    for name, variant in report.variants.items():
        table = Table(
            title=f"{dataset} {report.split}: {report.n_queries} queries, {variant.n_docs} docs, "
            f"{variant.n_chunks} chunks ({name})"
        )
        table.add_column("mode")
        for metric in METRIC_NAMES:
            table.add_column(metric, justify="right")
        for mode, values in variant.metrics.items():
            table.add_row(mode, *(f"{values[m]:.4f}" for m in METRIC_NAMES))
        console.print(table)
        lat = variant.latency_ms
        console.print(
            f"HNSW recall@10 vs exact: {variant.hnsw_recall_at_10:.4f}; dense search p50/p95 "
            f"{lat['hnsw_p50']:.1f}/{lat['hnsw_p95']:.1f} ms (exact scan {lat['exact_p50']:.1f}/"
            f"{lat['exact_p95']:.1f} ms); query embedding p50 {lat['embed_p50']:.1f} ms"
        )
    if dataset != "SciFact":
        return
    ref = Table(title="Published SciFact test nDCG@10")
    ref.add_column("system")
    ref.add_column("nDCG@10", justify="right")
    for system, value in REFERENCE_NDCG10.items():
        ref.add_row(system, f"{value:.4f}")
    console.print(ref)


def run_retrieval_command(
    split: str,
    variants: list[str] | None,
    limit: int | None,
    as_json: bool,
    output: Path | None,
    tune: bool = False,
    dataset: Path | None = None,
) -> None:
    """Body of `rag eval retrieval` (see `evals.cli`): SciFact, or the BEIR folder `dataset` (its `qrels/SPLIT.tsv`)
    in a scratch database of its own; exits 1 with a message on bad input or a stack error."""
    err = Console(stderr=True)
    if dataset is None and split not in get_args(Split):
        err.print(f"[bold red]error:[/] --split {split!r}; expected one of {get_args(Split)}")
        raise typer.Exit(1)
    chosen = variants or ["passage", "chunked"]
    bad = [v for v in chosen if v not in get_args(Variant)]
    if bad:
        err.print(f"[bold red]error:[/] --variant {bad[0]!r}; expected one of {get_args(Variant)}")
        raise typer.Exit(1)
    settings = Settings()
    try:
        if dataset is None:
            name, db_prefix, source = "SciFact", "rag_eval_scifact", "scifact"
            corpus = load_corpus()
            queries = load_queries(cast(Split, split))[:limit]
            qrels = load_qrels(split)
        else:
            beir = load_beir(dataset, split)
            name, db_prefix, source = beir.name, beir.database_prefix(), beir.name
            corpus, queries, qrels = beir.corpus, beir.queries[:limit], beir.qrels
        server = settings.resolved_database_url()
        progress, advance = progress_bar(err)
        with progress:
            report = asyncio.run(
                run_retrieval_eval(
                    settings,
                    server,
                    list(corpus.values()),
                    queries,
                    qrels,
                    split=split,
                    variants=[cast(Variant, v) for v in chosen],
                    db_prefix=db_prefix,
                    progress=advance,
                    source=source,
                )
            )
    except (DatasetError, EmbedderError, StoreError, ValueError, asyncpg.PostgresError, OSError) as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    data = report.to_json()
    if tune:
        tuned = {}
        for name, variant in report.variants.items():
            grid = tune_fusion(variant, qrels)
            tuned[name] = [{"rrf_k": k, "dense_weight": w, **m} for k, w, m in grid]
        data["fusion_grid"] = tuned
    stem = f"retrieval-{split}" if dataset is None else f"retrieval-{db_prefix.removeprefix('rag_eval_')}-{split}"
    path = output or settings.data_dir / "evals" / f"{stem}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    if as_json:
        print(json.dumps(data))
    else:
        console = Console()
        render(report, console, name)
        for name, rows in cast(dict[str, list[dict[str, float]]], data.get("fusion_grid", {})).items():
            console.print(f"RRF grid ({name}), best nDCG@10 first (full-text weight 1):")
            for row in rows[:8]:
                console.print(
                    f"  k={row['rrf_k']:g} dense_weight={row['dense_weight']:g}: nDCG@10 {row['ndcg@10']:.4f} "
                    f"recall@100 {row['recall@100']:.4f}"
                )
        console.print(f"JSON report: {path}")
