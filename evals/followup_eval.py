"""The follow-up eval (`rag eval followups`): how well each search query of a follow-up finds the claim's evidence, on
SciFact test, through the real stack (Triton embedder, pgvector, the LLM at `LLM_BASE_URL`).

The set (`evals.followup_set`): two-turn conversations made from SciFact test claims by rule; the second turn names
the claim's subject only through a pronoun, and its qrels are the claim's. For each pair, one at a time, the app's
retrieval (`Retriever.search`, the settings' mode and fusion, `TOP_K` raised to 10) runs with four queries:

- `raw`: the follow-up as it is (what a search without the conversation sees);
- `condensed`: `agent.core.followup.condensed_query` (`FOLLOWUP_QUERY=condense`);
- `rewritten`: `agent.core.followup.search_query` with the LLM rewrite (`FOLLOWUP_QUERY=rewrite`: the settings'
  `FOLLOWUP_REWRITE_MAX_TOKENS` and `FOLLOWUP_REWRITE_TIMEOUT_S`), falling back to the condensed query;
- `reference`: the original claim (what a perfect rewrite would search with).

Figures: recall@10 and nDCG@10 per query kind (`evals.metrics`), the rewrite's added latency (p50/p95 ms, the LLM
round trip at concurrency 1, fallbacks included) and its fallback rate by reason. The documents searched are the
pairs' gold documents plus a fixed sample of the rest of the corpus (`--corpus-docs`, default 1,000; the full 5,183
takes minutes to embed on CPU), stored in a database of their own (re-runs reuse it).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from agent.config.settings import Settings
from agent.core.followup import LLMRewriter, condensed_query, search_query
from agent.core.llm import build_model
from agent.core.wiring import build_embedder, build_retriever, build_rewriter, build_store
from evals.followup_set import corpus_sample, follow_up_pairs
from evals.machine import machine_info
from evals.metrics import evaluate
from evals.plots import emit_report
from evals.retrieval_eval import database_name, ensure_database, ingest_passages
from evals.scifact import load_corpus, load_qrels, load_queries
from tools.stats import percentiles

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = ("raw", "condensed", "rewritten", "reference")
DEPTH = 10
"""Documents ranked per query (recall@10 and nDCG@10)."""


async def run_followup_eval(limit: int | None, corpus_docs: int | None) -> dict[str, Any]:
    """Run the eval (module docstring) and return the report.

    Raises:
        EmbedderError / StoreError / asyncpg.PostgresError: the stack is down.
    """
    settings = Settings()
    pairs = follow_up_pairs(load_queries("test"), limit)
    all_qrels = load_qrels("test")
    qrels = {p.pair_id: all_qrels[p.pair_id] for p in pairs}
    corpus = load_corpus()
    chosen = corpus_sample(list(corpus), [d for q in qrels.values() for d in q], corpus_docs)
    name = database_name(f"rag_eval_followups_{len(chosen)}", "passage", settings)
    url = await ensure_database(settings.resolved_database_url(), name)
    rewriter = build_rewriter(build_model(settings), settings.model_copy(update={"followup_query": "rewrite"}))
    assert isinstance(rewriter, LLMRewriter)
    runs: dict[str, dict[str, list[str]]] = {kind: {} for kind in KINDS}
    rewrite_ms: list[float] = []
    fallbacks: Counter[str] = Counter()
    samples: list[dict[str, str]] = []
    started = time.perf_counter()
    async with build_embedder(settings) as embedder:
        spec = embedder.spec
        async with build_store(url, spec.name, spec.dim, settings) as store:
            await ingest_passages([corpus[d] for d in chosen], embedder, store, "scifact", settings.ingest_batch_docs)
            retriever = build_retriever(embedder, store, settings)
            await search_query(["Is vitamin D linked to bone density?"], "and does it help?", rewriter)  # warm-up
            for pair in pairs:
                found = await search_query([pair.first], pair.second, rewriter)
                rewrite_ms.append(found.rewrite_ms)
                fallbacks[found.fallback or "none"] += 1
                queries = {
                    "raw": pair.second,
                    "condensed": condensed_query([pair.first], pair.second),
                    "rewritten": found.query,
                    "reference": pair.claim,
                }
                for kind, query in queries.items():
                    result = await retriever.search(query, DEPTH)
                    runs[kind][pair.pair_id] = list(dict.fromkeys(p.doc_id for p in result.passages))[:DEPTH]
                if len(samples) < 5:
                    samples.append({"first": pair.first, "second": pair.second, "rewritten": found.query})
    metrics = {kind: evaluate(qrels, runs[kind]) for kind in KINDS}
    pct = percentiles(rewrite_ms, (50, 95))
    n = len(pairs)
    report: dict[str, Any] = {
        "command": "rag eval followups",
        "split": "test",
        "n_pairs": n,
        "corpus_docs": len(chosen),
        "llm_model": settings.llm_model,
        "retrieval": f"{settings.retrieval_mode}, {settings.fusion_method} fusion (the app's settings)",
        "rewrite": {
            "max_tokens": settings.followup_rewrite_max_tokens,
            "timeout_s": settings.followup_rewrite_timeout_s,
            "added_ms": {"p50": round(pct["p50"], 1), "p95": round(pct["p95"], 1), "n": n},
            "fallback_rate": round((n - fallbacks["none"]) / n, 4),
            "fallbacks": {k: v for k, v in sorted(fallbacks.items()) if k != "none"},
        },
        "queries": {
            kind: {"recall@10": round(m["recall@10"], 4), "ndcg@10": round(m["ndcg@10"], 4)}
            for kind, m in metrics.items()
        },
        "samples": samples,
        "eval_seconds": round(time.perf_counter() - started, 1),
        "machine": machine_info(),
    }
    best = max(("condensed", "rewritten"), key=lambda k: (metrics[k]["ndcg@10"], k == "condensed"))
    report["default"] = "condense" if best == "condensed" else "rewrite"
    return report


def render(report: dict[str, Any], console: Any) -> None:
    """The figures as Rich tables."""
    from rich.table import Table

    table = Table(
        "query",
        "recall@10",
        "nDCG@10",
        title=f"follow-ups: {report['n_pairs']} SciFact test pairs over {report['corpus_docs']} documents",
    )
    for kind, m in report["queries"].items():
        table.add_row(kind, f"{m['recall@10']:.4f}", f"{m['ndcg@10']:.4f}")
    console.print(table)
    rw = report["rewrite"]
    console.print(
        f"rewrite ({report['llm_model']}): added p50/p95 {rw['added_ms']['p50']:.0f}/{rw['added_ms']['p95']:.0f} ms, "
        f"fallback rate {rw['fallback_rate']:.1%} {rw['fallbacks']}; best default: FOLLOWUP_QUERY={report['default']}"
    )


def run_followups_command(limit: int | None, corpus_docs: int | None, output: Path | None, as_json: bool) -> None:
    """`rag eval followups` (options in `evals.cli.followups`): measure, print and write the report (default
    `evals/results/followups-scifact-test.json`)."""
    import asyncio

    report = asyncio.run(run_followup_eval(limit, corpus_docs))
    emit_report(report, as_json, output or RESULTS / "followups-scifact-test.json", render)
