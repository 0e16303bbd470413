"""Hybrid fusion of a dense and a lexical ranked list: weighted reciprocal rank fusion, or a convex combination of
normalised scores; `tools.retrieval` fuses with the method and parameters of its `RetrievalConfig`.

RRF: score(d) = sum over lists of w / (k + rank(d)), rank from 1 (Cormack, Clarke and Buettcher, "Reciprocal Rank
Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009; k = 60 there).

Convex combination (Bruch, Gai and Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 42(1),
2023): each list's scores are normalised, then fused as alpha * dense + (1 - alpha) * lexical. Normalisations:

- `min_max`: (s - min) / (max - min) over the list's returned scores;
- `z_score`: (s - mean) / standard deviation over the list's returned scores;
- `tmm` (theoretical min-max, their best-performing choice): (s - m) / (max - m), m the score's theoretical lower
  bound (−1 for cosine similarity, 0 for BM25) instead of the list's observed minimum.

A chunk absent from one list (below its cut-off) takes that list's lowest normalised score, the score of the last
hit it returned: it ranked at best there. Bruch et al. find the convex combination more effective than RRF in and
out of domain once alpha is tuned on a few queries, and stable in alpha.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, get_args

import numpy as np

from tools.records import ChunkHit

FusionMethod = Literal["rrf", "convex"]
"""How hybrid retrieval fuses: weighted reciprocal rank fusion (`rrf`) or the convex combination (`convex`)."""
FUSION_METHODS: tuple[FusionMethod, ...] = get_args(FusionMethod)
Normalisation = Literal["min_max", "z_score", "tmm"]
"""The convex combination's per-list score normalisation (see the module docstring)."""
NORMALISATIONS: tuple[Normalisation, ...] = get_args(Normalisation)
THEORETICAL_MIN = (-1.0, 0.0)
"""Lower bounds of the (dense, full-text) scores for `tmm`: cosine similarity and BM25."""


def normalise(scores: Sequence[float], method: Normalisation, theoretical_min: float = 0.0) -> list[float]:
    """`scores` normalised by `method` (see the module docstring); `theoretical_min` is the bound `tmm` uses.

    A list whose scores are all equal normalises to 1.0 each (min-max, tmm when max = the bound) or 0.0 each
    (z-score): no spread, no preference.

    Raises:
        ValueError: unknown method.
    """
    if method not in NORMALISATIONS:
        raise ValueError(f"normalisation {method!r}; expected one of {NORMALISATIONS}")
    if not scores:
        return []
    values = np.asarray(scores, dtype=np.float64)
    if method == "z_score":
        std = float(values.std())
        return [0.0] * len(values) if std == 0 else ((values - values.mean()) / std).tolist()
    low = float(values.min()) if method == "min_max" else theoretical_min
    span = float(values.max()) - low
    return [1.0] * len(values) if span <= 0 else ((values - low) / span).tolist()


def convex_fusion(
    dense: Sequence[ChunkHit],
    lexical: Sequence[ChunkHit],
    alpha: float,
    normalisation: Normalisation = "min_max",
    key: Callable[[ChunkHit], str] = lambda hit: hit.chunk_id,
) -> list[tuple[ChunkHit, float]]:
    """Fuse a dense and a lexical list by a convex combination of normalised scores (Bruch et al., TOIS 2023).

    score(c) = alpha * norm_dense(c) + (1 - alpha) * norm_lexical(c); a chunk missing from a list gets that list's
    lowest normalised score (an empty list contributes 0).

    Args:
        dense: hits best first, `score` a cosine similarity.
        lexical: hits best first, `score` a BM25 score.
        alpha: weight of the dense list, 0..1.
        normalisation: `min_max`, `z_score` or `tmm` (bounds `THEORETICAL_MIN`).
        key: what identifies one item across lists (within a list only its first appearance counts).

    Returns:
        (hit, fused score) best first, the hit being the item's first appearance (dense list first); ties by
        first appearance.

    Raises:
        ValueError: alpha outside 0..1 or an unknown normalisation.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"convex fusion alpha={alpha}; expected 0..1")
    fused: dict[str, float] = {}
    hits: dict[str, ChunkHit] = {}
    parts: list[tuple[dict[str, float], float, float]] = []
    for hits_list, weight, bound in zip((dense, lexical), (alpha, 1.0 - alpha), THEORETICAL_MIN, strict=True):
        firsts: dict[str, ChunkHit] = {}
        for hit in hits_list:
            firsts.setdefault(key(hit), hit)
        normed = normalise([h.score for h in firsts.values()], normalisation, bound)
        parts.append((dict(zip(firsts, normed, strict=True)), min(normed, default=0.0), weight))
        for item, hit in firsts.items():
            hits.setdefault(item, hit)
    for item in hits:
        fused[item] = sum(weight * scores.get(item, floor) for scores, floor, weight in parts)
    order = sorted(hits, key=lambda item: -fused[item])
    return [(hits[item], fused[item]) for item in order]


def reciprocal_rank_fusion(
    ranked_lists: Sequence[Sequence[ChunkHit]],
    k: float = 60.0,
    weights: Sequence[float] | None = None,
    key: Callable[[ChunkHit], str] = lambda hit: hit.chunk_id,
) -> list[tuple[ChunkHit, float]]:
    """Fuse ranked lists by weighted reciprocal rank fusion.

    score(c) = sum over lists L containing c of weights[L] / (k + rank_L(c)), ranks from 1 (Cormack, Clarke and
    Buettcher, "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009,
    with k = 60 there; the per-list weights are the usual weighted-RRF extension).

    Args:
        ranked_lists: lists of hits, each best first.
        k: the RRF constant (> 0); larger k flattens the rank discount.
        weights: one weight per list (default 1.0 each).
        key: what identifies one item across lists (default `chunk_id`; `text_key` merges equal texts). Within
            one list only an item's first (best) rank counts.

    Returns:
        (hit, fused score) best first, the hit being the item's first appearance; ties broken by first
        appearance (list order, then rank).

    Raises:
        ValueError: k <= 0, or weights of another length than ranked_lists.
    """
    if k <= 0:
        raise ValueError(f"RRF k={k}; expected > 0")
    weights = list(weights) if weights is not None else [1.0] * len(ranked_lists)
    if len(weights) != len(ranked_lists):
        raise ValueError(f"{len(weights)} RRF weights for {len(ranked_lists)} ranked lists; expected one per list")
    scores: dict[str, float] = {}
    hits: dict[str, ChunkHit] = {}
    for hits_list, weight in zip(ranked_lists, weights, strict=True):
        seen: set[str] = set()
        for rank, hit in enumerate(hits_list, 1):
            item = key(hit)
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            hits.setdefault(item, hit)
    order = sorted(scores, key=lambda item: -scores[item])
    return [(hits[item], scores[item]) for item in order]
