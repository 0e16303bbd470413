"""A CI-size run of the SciFact retrieval eval through the real Triton embedder and pgvector, with floors that a real
regression breaks (its pure pieces: test_retrieval_metrics.py)."""

from __future__ import annotations

import json

import pytest

from agent.config.settings import Settings
from evals.retrieval_eval import run_retrieval_eval
from evals.scifact import load_corpus, load_qrels, load_queries

pytestmark = pytest.mark.stack

N_CLAIMS = 40
N_DISTRACTORS = 250
PREFIX = "test_eval"


async def test_ci_subset_of_the_eval_through_triton_and_pgvector(
    settings: Settings, postgres_url: str, triton_server: Settings
) -> None:
    """40 test claims, their gold abstracts and 250 distractors as one passage per document, every mode.

    Floors sit a few points under the figures measured on this subset (see the assertions); a broken export,
    tokenizer, pooling, truncation, BM25 or fusion drops them far further.
    """
    queries = load_queries("test")[:N_CLAIMS]
    qrels = load_qrels("test")
    gold = {doc for q in queries for doc in qrels[q.query_id]}
    corpus = load_corpus()
    distractors = [d for d in corpus.values() if d.doc_id not in gold][:N_DISTRACTORS]
    docs = [corpus[d] for d in sorted(gold)] + distractors
    report = await run_retrieval_eval(
        settings, postgres_url, docs, queries, qrels, variants=("passage",), db_prefix=PREFIX
    )
    print(json.dumps(report.to_json(), indent=1))
    passage = report.variants["passage"]
    assert report.n_queries == N_CLAIMS
    assert passage.n_docs == passage.n_chunks == len(docs)
    m = passage.metrics
    # measured on this subset (2026-11-29): dense 0.926, full-text (Postgres BM25) 0.901, hybrid 0.939, bm25s 0.921
    assert m["dense"]["ndcg@10"] >= 0.89
    assert m["full_text"]["ndcg@10"] >= 0.86
    assert m["hybrid"]["ndcg@10"] >= max(m["dense"]["ndcg@10"], m["full_text"]["ndcg@10"])
    assert m["hybrid"]["recall@100"] >= 0.97
    assert passage.hnsw_recall_at_10 >= 0.98
    # the Postgres BM25 and the bm25s reference rank the same text alike
    assert abs(m["full_text"]["ndcg@10"] - m["bm25s"]["ndcg@10"]) <= 0.05
    # the eval is idempotent: a second run reuses the stored vectors (nothing re-embedded) and gives the same figures
    again = await run_retrieval_eval(
        settings, postgres_url, docs, queries, qrels, variants=("passage",), db_prefix=PREFIX
    )
    for mode, values in m.items():
        assert again.variants["passage"].metrics[mode] == pytest.approx(values, abs=1e-9)
