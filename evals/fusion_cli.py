"""`rag eval tune-fusion`: the fusion grid on SciFact train (`evals.fusion_tuning`), its winners, and their SciFact
test figures with the train-chosen parameters; Rich tables or JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import asyncpg
import typer
from rich.console import Console
from rich.table import Table

from agent.config.settings import Settings
from evals.fusion_tuning import (
    PLAIN,
    RM3_GRID,
    GridPoint,
    Ranker,
    collect_candidates,
    grid_search,
    point_json,
    ranker_of,
    rm3_name,
    score,
    winners,
)
from evals.retrieval_cli import progress_bar
from evals.scifact import DatasetError, load_corpus, load_qrels, load_queries
from tools.errors import EmbedderError, StoreError
from tools.retrieval import CandidateLists

SHIPPED_RRF = GridPoint("rrf", PLAIN, {"rrf_k": 5.0, "dense_weight": 0.75, "full_text_weight": 1.0}, {})
"""The RRF setting shipped before this tuning (RRF_K 5, RRF_WEIGHT_DENSE 0.75), scored beside the winners."""
DENSE = GridPoint("dense", PLAIN, {}, {})


def _params(point: GridPoint) -> str:
    if point.method == "dense":
        return "–"
    text = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.params.items())
    return f"{point.lexical}; {text}" if text else point.lexical


def truncated(ranker: Ranker, size: int) -> Ranker:
    """`ranker` over the first `size` hits of each list: the lists the app fuses (`RETRIEVAL_CANDIDATES` each)."""
    return lambda lists: ranker(CandidateLists(lists.dense[:size], lists.full_text[:size], {}))


def run_tune_fusion_command(limit: int | None, rm3: bool, as_json: bool, output: Path | None) -> None:
    """Body of `rag eval tune-fusion` (see `evals.cli`); exits 1 with a message on bad input or a stack error."""
    err = Console(stderr=True)
    settings = Settings()
    grid_rm3 = RM3_GRID if rm3 else ()
    try:
        corpus = load_corpus()
        train, test = load_queries("train")[:limit], load_queries("test")[:limit]
        all_train, all_test = load_qrels("train"), load_qrels("test")
        train_qrels = {q.query_id: all_train[q.query_id] for q in train}
        test_qrels = {q.query_id: all_test[q.query_id] for q in test}
        progress, advance = progress_bar(err)
        with progress:
            cache = asyncio.run(
                collect_candidates(
                    settings,
                    settings.resolved_database_url(),
                    list(corpus.values()),
                    [*train, *test],
                    grid_rm3,
                    progress=advance,
                )
            )
            legs = [PLAIN, *(rm3_name(p) for p in grid_rm3)]
            points = grid_search(cache, train_qrels, legs, progress=advance)
    except (DatasetError, EmbedderError, StoreError, ValueError, asyncpg.PostgresError, OSError) as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    best = winners(points)
    rows: list[dict[str, Any]] = []
    for name, point in [("dense", DENSE), ("rrf_shipped", SHIPPED_RRF), *best.items()]:
        ranker = ranker_of(point)
        rows.append(
            {
                "name": name,
                "method": point.method,
                "lexical": point.lexical,
                "params": point.params,
                "train": score(cache, train_qrels, ranker, point.lexical),
                "test": score(cache, test_qrels, ranker, point.lexical),
                f"test_top{settings.retrieval_candidates}": score(
                    cache, test_qrels, truncated(ranker, settings.retrieval_candidates), point.lexical
                ),
            }
        )
    data = {
        "command": "rag eval tune-fusion" + ("" if rm3 else " --no-rm3") + (f" --limit {limit}" if limit else ""),
        "tuned_on": f"SciFact train ({len(train_qrels)} claims)",
        "reported_on": f"SciFact test ({len(test_qrels)} claims)",
        "depth": "top 100 dense and top 100 full-text hits per claim, passage layout; test_topN: the same "
        "parameters on each list's first N hits (RETRIEVAL_CANDIDATES, what the app fuses)",
        "methods": rows,
        "grid": [point_json(p) for p in points],
    }
    path = output or settings.data_dir / "evals" / "tune-fusion.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    if as_json:
        print(json.dumps(data))
        return
    render(points, rows, data, Console())
    Console().print(f"JSON report: {path}")


def render(points: list[GridPoint], rows: list[dict[str, Any]], data: dict[str, Any], console: Console) -> None:
    """Print the top of the grid per method and lexical leg, then the winners' train and test figures."""
    grid = Table(title=f"Fusion grid on {data['tuned_on']}: best 5 per method and lexical leg, by nDCG@10")
    for column in ("method", "parameters", "nDCG@10", "recall@10", "recall@100"):
        grid.add_column(column, justify="right" if column[0].isupper() or column.startswith("recall") else "left")
    groups: dict[tuple[str, str], list[GridPoint]] = {}
    for point in points:
        groups.setdefault((point.method, point.lexical), []).append(point)
    for (method, _), group in groups.items():
        for point in sorted(group, key=lambda p: -p.metrics["ndcg@10"])[:5]:
            m = point.metrics
            grid.add_row(
                method, _params(point), f"{m['ndcg@10']:.4f}", f"{m['recall@10']:.4f}", f"{m['recall@100']:.4f}"
            )
    console.print(grid)
    table = Table(title=f"Winners (chosen on {data['tuned_on']}) on {data['reported_on']}")
    top = next((key for key in rows[0] if key.startswith("test_top")), "test") if rows else "test"
    columns = ["name", "parameters", "train nDCG@10", "test nDCG@10", "test recall@10", "test recall@100"]
    for column in [*columns, f"{top.replace('_', ' ')} nDCG@10"]:
        table.add_column(column, justify="left" if column in ("name", "parameters") else "right")
    for row in rows:
        point = GridPoint(row["method"], row["lexical"], row["params"], {})
        table.add_row(
            row["name"],
            _params(point),
            f"{row['train']['ndcg@10']:.4f}",
            f"{row['test']['ndcg@10']:.4f}",
            f"{row['test']['recall@10']:.4f}",
            f"{row['test']['recall@100']:.4f}",
            f"{row[top]['ndcg@10']:.4f}",
        )
    console.print(table)
