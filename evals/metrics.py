"""Ranking metrics through `ir-measures` (Macdonald and Tonellotto, ICTIR 2020) on `pytrec_eval` (trec_eval).

The four BEIR figures: nDCG@10 (`ndcg_cut.10`, gains = qrels grades, log2 discount), recall@10 and recall@100
(relevant retrieved in the top k / all relevant), MRR@10 (1 / rank of the first relevant document in the top 10,
0 if none). Every query of the qrels counts: a query with no retrieved document scores 0 on every metric (plain
`pytrec_eval`, and so BEIR's `EvaluateRetrieval.evaluate`, would silently drop it from the mean).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ir_measures
from ir_measures import RR, R, nDCG

METRICS = {"ndcg@10": nDCG @ 10, "recall@10": R @ 10, "recall@100": R @ 100, "mrr@10": RR @ 10}
"""Our metric names -> ir-measures measures."""

Run = Mapping[str, Sequence[str]]
"""query id -> retrieved doc ids, best first (no duplicates)."""


def ranked_to_scores(ranking: Sequence[str]) -> dict[str, float]:
    """Doc ids best first -> trec_eval scores that reproduce exactly that order (n, n-1, ..., 1).

    trec_eval re-sorts by score and breaks ties by doc id, so passing our own scores could reorder ties; rank-derived
    scores keep the order the retriever produced.

    Raises:
        ValueError: a doc id appears twice.
    """
    if len(set(ranking)) != len(ranking):
        raise ValueError("ranking lists a doc id twice; expected unique doc ids per query")
    n = len(ranking)
    return {doc_id: float(n - i) for i, doc_id in enumerate(ranking)}


def evaluate(qrels: Mapping[str, Mapping[str, int]], run: Run) -> dict[str, float]:
    """Mean nDCG@10, recall@10, recall@100 and MRR@10 over all queries of `qrels`.

    Args:
        qrels: query id -> {doc id: grade >= 1 relevant}.
        run: query id -> doc ids best first; queries absent from `run` score 0.

    Returns:
        {"ndcg@10", "recall@10", "recall@100", "mrr@10"} -> mean in [0, 1].

    Raises:
        ValueError: `qrels` is empty, or `run` has queries that `qrels` lacks.
    """
    if not qrels:
        raise ValueError("qrels is empty; expected at least one judged query")
    extra = set(run) - set(qrels)
    if extra:
        raise ValueError(f"run has {len(extra)} queries without qrels, e.g. {sorted(extra)[:3]}")
    trec_qrels = {q: {d: int(g) for d, g in docs.items()} for q, docs in qrels.items()}
    trec_run = {q: ranked_to_scores(docs) for q, docs in run.items() if docs}
    by_measure = {m: name for name, m in METRICS.items()}
    sums = dict.fromkeys(METRICS, 0.0)
    for metric in ir_measures.iter_calc(list(METRICS.values()), trec_qrels, trec_run):
        sums[by_measure[metric.measure]] += float(metric.value)
    return {name: total / len(qrels) for name, total in sums.items()}
