"""The rerank eval: the cross-encoder on top of hybrid retrieval, on SciFact test, through the real stack.

`rag eval rerank` (needs `rag up` and the reranker on Triton: `python -m
evals.train_reranker`, then `rag down` / `rag up` so that the local Triton loads it). For each test claim, one at a
time (concurrency 1):

1. the app's hybrid candidate lists (`tools.retrieval.Retriever.candidate_lists`, 100 hits per list) over the
   SciFact passage store of `rag eval retrieval`, fused as the settings say (`Retriever.rank`: RRF or convex
   fusion): the fused ranking;
2. the reranker on Triton (`tools.embedder.reranker.TritonReranker`) scores the first `max(depths)` fused hits once;
   the ranking at each depth re-orders the first `depth` of them by those scores (`tools.rerank.rerank` with a
   scorer that replays them: a pair's logit does not depend on the other pairs), the rest keep their fused order;
3. latency: for the first `--timed-claims` claims, `tools.rerank.rerank` runs against Triton at each depth in turn,
   one claim at a time (concurrency 1); its wall time is what the stage adds to a question (tokenisation, gRPC,
   Triton's queue and the model).

Metrics (`evals.metrics`, BEIR's): nDCG@10 and recall@10 of the fused ranking and of each reranked one (the hits
after `depth` keep their fused order). The cost per 1,000 questions is the added time of 1,000 questions one after
another (the mean latency x 1,000): at concurrency 1 the model occupies the machine's cores for that long.

Also measured, not shipped unless it pays: the reranked order fused with the fused order by RRF (k = 60), which
keeps some of the first stage's evidence. Skip rule, likewise: a question whose dense and full-text lists agree on
their first document (the fusion is "decisive") keeps its fused ranking; the report gives the share of claims
skipped and the nDCG@10 of that policy at each depth.

The reranker is in-domain (trained on SciFact train); its figures are labelled so wherever they appear.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evals.metrics import evaluate
from evals.plots import emit_report, pyplot, save_figure
from evals.retrieval_eval import DEPTH, database_name, doc_ranking, ensure_database, ingest_passages
from evals.scifact import load_corpus, load_qrels, load_queries
from tools.fusion import reciprocal_rank_fusion
from tools.rerank import rerank
from tools.retrieval import text_key
from tools.stats import percentiles

LABEL = "in-domain (trained on SciFact train)"
RESULTS = Path(__file__).resolve().parent / "results"
DEPTHS = (20, 50, 100)
COMBINE_RRF_K = 60.0
"""RRF constant of the measured (not shipped) combination of the reranked and the fused order (Cormack et al.'s k)."""
TARGET_GAIN = 0.02
"""nDCG@10 the stage must add over the best fused ranking to ship on by default."""
TARGET_P95_MS = 150.0
"""Most added p95 latency per question at concurrency 1 for the stage to ship on by default, ms."""


def summarize(
    fused_metrics: dict[str, float],
    per_depth: dict[int, dict[str, Any]],
) -> dict[str, Any]:
    """The verdict: the best depth by nDCG@10 gain, and whether any depth meets both targets (gain >=
    `TARGET_GAIN` and added p95 <= `TARGET_P95_MS`); the shipped depth is the smallest that does, else 0 (off)."""
    meeting = [
        d
        for d, row in sorted(per_depth.items())
        if row["ndcg@10"] - fused_metrics["ndcg@10"] >= TARGET_GAIN and row["added_ms"]["p95"] <= TARGET_P95_MS
    ]
    best = max(per_depth, key=lambda d: per_depth[d]["ndcg@10"])
    return {
        "best_depth_by_ndcg@10": best,
        "best_gain_ndcg@10": round(per_depth[best]["ndcg@10"] - fused_metrics["ndcg@10"], 4),
        "depths_meeting_targets": meeting,
        "shipped_rerank_depth": meeting[0] if meeting else 0,
        "targets": {"gain_ndcg@10": TARGET_GAIN, "added_p95_ms": TARGET_P95_MS, "concurrency": 1},
    }


class ReplayScorer:
    """Replays logits already computed for one claim's passages (by text), so that every depth is ranked by the same
    scores without asking Triton again."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores

    async def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]:
        """The recorded logit of each passage, `(len(passages),)` float32."""
        return np.array([self.scores[p] for p in passages], dtype=np.float32)


async def run_rerank_eval(depths: Sequence[int], limit: int | None, timed_claims: int) -> dict[str, Any]:
    """Run the eval (module docstring) and return the report.

    Raises:
        EmbedderError / StoreError / asyncpg.PostgresError: the stack is down, or the reranker is not loaded.
    """
    from agent.config.settings import Settings
    from agent.core.wiring import build_embedder, build_reranker, build_retriever, build_store
    from evals.machine import machine_info

    settings = Settings()
    corpus = load_corpus()
    queries = load_queries("test")[:limit]
    qrels = {q.query_id: load_qrels("test")[q.query_id] for q in queries}
    url = await ensure_database(
        settings.resolved_database_url(), database_name("rag_eval_scifact", "passage", settings)
    )
    fused_run: dict[str, list[str]] = {}
    runs: dict[int, dict[str, list[str]]] = {d: {} for d in depths}
    skip_runs: dict[int, dict[str, list[str]]] = {d: {} for d in depths}
    combined_runs: dict[int, dict[str, list[str]]] = {d: {} for d in depths}
    added_ms: dict[int, list[float]] = {d: [] for d in depths}
    first_stage_ms: list[float] = []
    decisive = 0
    started = time.perf_counter()
    async with build_embedder(settings) as embedder, build_reranker(settings) as reranker:
        spec = embedder.spec
        async with build_store(url, spec.name, spec.dim, settings) as store:
            await ingest_passages(list(corpus.values()), embedder, store, "scifact", settings.ingest_batch_docs)
            retriever = build_retriever(embedder, store, settings)
            await reranker.score("warm-up", ["warm-up passage"])
            for n, query in enumerate(queries):
                start = time.perf_counter()
                lists = await retriever.candidate_lists(query.text, DEPTH, mode="hybrid")
                ranked = retriever.rank(lists, "hybrid")
                first_stage_ms.append((time.perf_counter() - start) * 1000)
                fused = doc_ranking([h for h, _ in ranked])
                fused_run[query.query_id] = fused
                agree = bool(lists.dense and lists.full_text) and lists.dense[0].doc_id == lists.full_text[0].doc_id
                decisive += agree
                if n < timed_claims:
                    for depth in depths:
                        start = time.perf_counter()
                        await rerank(query.text, ranked, reranker, depth, len(ranked))
                        added_ms[depth].append((time.perf_counter() - start) * 1000)
                head = [h.text for h, _ in ranked[: max(depths)]]
                replay = ReplayScorer(dict(zip(head, (await reranker.score(query.text, head)).tolist(), strict=True)))
                for depth in depths:
                    reordered = await rerank(query.text, ranked, replay, depth, len(ranked))
                    runs[depth][query.query_id] = doc_ranking([h for h, _ in reordered])
                    both = [[h for h, _ in reordered], [h for h, _ in ranked]]
                    combined = reciprocal_rank_fusion(both, k=COMBINE_RRF_K, key=text_key)
                    combined_runs[depth][query.query_id] = doc_ranking([h for h, _ in combined])
                    skip_runs[depth][query.query_id] = fused if agree else runs[depth][query.query_id]
    fused_metrics = evaluate(qrels, fused_run)
    per_depth: dict[int, dict[str, Any]] = {}
    for depth in depths:
        metrics = evaluate(qrels, runs[depth])
        skip_metrics = evaluate(qrels, skip_runs[depth])
        combined_metrics = evaluate(qrels, combined_runs[depth])
        pct = percentiles(added_ms[depth], (50, 95))
        mean_ms = statistics.fmean(added_ms[depth])
        per_depth[depth] = {
            "ndcg@10": round(metrics["ndcg@10"], 4),
            "recall@10": round(metrics["recall@10"], 4),
            "mrr@10": round(metrics["mrr@10"], 4),
            "gain_ndcg@10": round(metrics["ndcg@10"] - fused_metrics["ndcg@10"], 4),
            "added_ms": {"p50": round(pct["p50"], 1), "p95": round(pct["p95"], 1), "n": len(added_ms[depth])},
            "added_mean_ms": round(mean_ms, 1),
            "machine_seconds_per_1000_questions": round(mean_ms, 1),
            "rrf_with_fused": {
                "ndcg@10": round(combined_metrics["ndcg@10"], 4),
                "recall@10": round(combined_metrics["recall@10"], 4),
            },
            "skip_when_lists_agree": {
                "ndcg@10": round(skip_metrics["ndcg@10"], 4),
                "recall@10": round(skip_metrics["recall@10"], 4),
                "mean_added_ms": round(mean_ms * (1 - decisive / len(queries)), 1),
            },
        }
    report: dict[str, Any] = {
        "command": "rag eval rerank",
        "label": LABEL,
        "reranker": settings.reranker_model,
        "split": "test",
        "n_queries": len(queries),
        "timed_claims": min(timed_claims, len(queries)),
        "concurrency": 1,
        "fused": {
            "retrieval": (
                f"hybrid convex fusion alpha={settings.fusion_alpha:g}, {settings.fusion_normalisation}"
                if settings.fusion_method == "convex"
                else f"hybrid RRF k={settings.rrf_k:g}, weights {settings.rrf_weight_dense:g}:"
                f"{settings.rrf_weight_full_text:g}"
            )
            + " (the app's settings)",
            "ndcg@10": round(fused_metrics["ndcg@10"], 4),
            "recall@10": round(fused_metrics["recall@10"], 4),
            "mrr@10": round(fused_metrics["mrr@10"], 4),
            "first_stage_ms": {k: round(v, 1) for k, v in percentiles(first_stage_ms, (50, 95)).items() if k != "n"},
        },
        "depths": {str(d): row for d, row in per_depth.items()},
        "decisive_share": round(decisive / len(queries), 4),
        "eval_seconds": round(time.perf_counter() - started, 1),
        "machine": machine_info(),
    }
    report["verdict"] = summarize(fused_metrics, per_depth)
    return report


def plot(report: dict[str, Any], path: Path) -> Path:
    """nDCG@10 and added p50/p95 latency against rerank depth, the fused ranking as a line."""
    plt = pyplot()
    depths = [int(d) for d in report["depths"]]
    rows = [report["depths"][str(d)] for d in depths]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(depths, [r["ndcg@10"] for r in rows], marker="o", label="reranked")
    left.axhline(report["fused"]["ndcg@10"], color="grey", linestyle="--", label="hybrid (fused), no rerank")
    left.axhline(report["fused"]["ndcg@10"] + TARGET_GAIN, color="grey", linestyle=":", label="target (+0.02)")
    left.set_xlabel("rerank depth (fused candidates)")
    left.set_ylabel("nDCG@10, SciFact test")
    left.set_xticks(depths)
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    right.plot(depths, [r["added_ms"]["p50"] for r in rows], marker="o", label="p50")
    right.plot(depths, [r["added_ms"]["p95"] for r in rows], marker="o", label="p95")
    right.axhline(TARGET_P95_MS, color="grey", linestyle=":", label="target p95")
    right.set_xlabel("rerank depth (fused candidates)")
    right.set_ylabel("added latency per question, ms (c=1)")
    right.set_xticks(depths)
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8)
    title = f"Cross-encoder rerank via Triton, {LABEL}; {report['machine']['cores']} CPU cores"
    return save_figure(fig, path, title)


def render(report: dict[str, Any], console: Any) -> None:
    """A table of the fused ranking and each depth."""
    from rich.table import Table

    table = Table(title=f"SciFact test, {report['n_queries']} claims: rerank ({LABEL})")
    for column in ("ranking", "nDCG@10", "recall@10", "added p50 ms", "added p95 ms", "s per 1,000 questions"):
        table.add_column(column, justify="right")
    fused = report["fused"]
    table.add_row("hybrid (fused)", f"{fused['ndcg@10']:.4f}", f"{fused['recall@10']:.4f}", "-", "-", "-")
    for depth, row in report["depths"].items():
        table.add_row(
            f"reranked top {depth}",
            f"{row['ndcg@10']:.4f}",
            f"{row['recall@10']:.4f}",
            f"{row['added_ms']['p50']:.0f}",
            f"{row['added_ms']['p95']:.0f}",
            f"{row['machine_seconds_per_1000_questions']:.0f}",
        )
    console.print(table)
    console.print(f"verdict: {report['verdict']}")


def run_rerank_command(
    depths: Sequence[int] | None,
    limit: int | None,
    output: Path | None,
    plot_path: Path | None,
    as_json: bool,
    timed_claims: int,
) -> None:
    """`rag eval rerank` (options in `evals.cli.rerank`): measure, plot, print and write the report (default
    `evals/results/rerank-scifact-test.json` and `.png`)."""
    report = asyncio.run(run_rerank_eval(tuple(depths or DEPTHS), limit, timed_claims))
    report["plot"] = plot(report, plot_path or RESULTS / "rerank-scifact-test.png").name
    emit_report(report, as_json, output or RESULTS / "rerank-scifact-test.json", render)
