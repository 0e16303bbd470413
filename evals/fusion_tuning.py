"""`rag eval tune-fusion`: choose the hybrid fusion and the full-text leg's RM3 feedback on SciFact train, then
report SciFact test with the train-chosen parameters.

Each claim's candidate lists are fetched once through the real stack (Triton query embedding, pgvector HNSW, the
store's BM25, and the BM25 of each RM3 setting of `RM3_GRID`), `DEPTH` hits each with their scores, on the
`passage` layout of `evals.retrieval_eval` (its database, reused), and cached as JSON; the grids of the fusion
parameters then run on the cached lists in pure Python (`tools.fusion`, `tools.retrieval.rank_candidates`):

- RRF (Cormack et al. 2009): k in `RRF_K_GRID` x dense weight in `DENSE_WEIGHT_GRID` (full-text weight 1);
- convex combination of normalised scores (Bruch, Gai and Ingber, ACM TOIS 2023): normalisation in
  `tools.fusion.NORMALISATIONS` x alpha in `ALPHA_GRID`;

first the lexical leg alone for plain BM25 and each RM3 setting, then both fusion grids with the plain BM25 leg and
with the best RM3 leg (`grid_search`). The winner of each method is the best train nDCG@10 (ties: the first in
grid order); the test split is only ever scored with those parameters.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.config.settings import Settings
from agent.core.wiring import build_embedder, build_retriever, build_store
from evals.metrics import evaluate
from evals.retrieval_eval import DEPTH, ProgressFn, database_name, doc_ranking, ensure_database, ingest_passages
from evals.scifact import CorpusDoc, Qrels, Query
from tools.fusion import NORMALISATIONS, Normalisation
from tools.records import ChunkHit
from tools.retrieval import CandidateLists, rank_candidates, text_key
from tools.retrieval_config import RetrievalConfig
from tools.rm3 import Rm3Params, rm3_terms

RRF_K_GRID = (1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 100.0)
DENSE_WEIGHT_GRID = (0.25, 0.5, 0.6, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0)
ALPHA_GRID = tuple(round(0.05 * i, 2) for i in range(21))
RM3_GRID = tuple(
    Rm3Params(fb_docs, fb_terms, weight) for fb_docs in (5, 10) for fb_terms in (10, 20) for weight in (0.5, 0.8)
)
"""RM3 settings tried (each costs one BM25 search per claim through the store): Anserini's default (10, 10, 0.5)
and its neighbours."""

PLAIN = "bm25"
"""Name of the lexical leg without feedback."""

CACHE_VERSION = 1

Ranker = Callable[[CandidateLists], list[ChunkHit]]
"""A ranking of one query's candidate lists, best first."""


def rm3_name(params: Rm3Params) -> str:
    """Short name of an RM3 setting, e.g. `rm3(10,10,0.5)` (fb_docs, fb_terms, original-query weight)."""
    return f"rm3({params.fb_docs},{params.fb_terms},{params.original_weight:g})"


def _packed(hits: Sequence[ChunkHit]) -> list[list[Any]]:
    return [[h.chunk_id, h.doc_id, text_key(h), h.score] for h in hits]


def _unpacked(rows: Sequence[Sequence[Any]]) -> list[ChunkHit]:
    # the chunk text is replaced by its key: `text_key` of the rebuilt hit is then a function of the original key,
    # so duplicate texts stay merged exactly as on the live lists
    return [ChunkHit(str(c), str(d), "", str(k), "", float(s)) for c, d, k, s in rows]


@dataclass
class CandidateCache:
    """Per query: the dense list and each lexical leg's list (`PLAIN` and `rm3_name(...)`), `DEPTH` hits each."""

    database: str
    queries: dict[str, dict[str, list[list[Any]]]] = field(default_factory=dict)
    _hits: dict[tuple[str, str], list[ChunkHit]] = field(default_factory=dict, repr=False)

    def lists(self, query_id: str, lexical: str) -> CandidateLists:
        """The cached (dense, `lexical`) lists of one query as `CandidateLists`."""
        return CandidateLists(self._list(query_id, "dense"), self._list(query_id, lexical), {})

    def _list(self, query_id: str, leg: str) -> list[ChunkHit]:
        if (query_id, leg) not in self._hits:
            self._hits[query_id, leg] = _unpacked(self.queries[query_id][leg])
        return self._hits[query_id, leg]

    def has(self, query_id: str, legs: Sequence[str]) -> bool:
        """Whether the query's dense list and every leg of `legs` are cached."""
        entry = self.queries.get(query_id, {})
        return "dense" in entry and all(leg in entry for leg in legs)

    @classmethod
    def load(cls, path: Path, database: str) -> CandidateCache:
        """The cache at `path` when it is of `database` and this version; an empty one otherwise."""
        if path.is_file():
            data = json.loads(path.read_text())
            if data.get("version") == CACHE_VERSION and data.get("database") == database:
                return cls(database, data["queries"])
        return cls(database)

    def save(self, path: Path) -> None:
        """Write the cache as JSON (parent folders made)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": CACHE_VERSION, "database": self.database, "queries": self.queries}))


def cache_path(settings: Settings, database: str) -> Path:
    """Where the candidate lists of `database` are cached: `DATA_DIR/evals/fusion-candidates-<database>-<hash>.json`,
    the hash of the settings the lists depend on (BM25, pruning, `hnsw.ef_search`, the RM3 grid)."""
    key = json.dumps(
        [settings.bm25_k1, settings.bm25_b, settings.bm25_postings_per_term, settings.hnsw_ef_search, DEPTH],
    )
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return settings.data_dir / "evals" / f"fusion-candidates-{database}-{digest}.json"


async def collect_candidates(
    settings: Settings,
    server_url: str,
    docs: Sequence[CorpusDoc],
    queries: Sequence[Query],
    rm3_grid: Sequence[Rm3Params] = RM3_GRID,
    db_prefix: str = "rag_eval_scifact",
    source: str = "scifact",
    progress: ProgressFn | None = None,
    concurrency: int = 4,
) -> CandidateCache:
    """The candidate lists of `queries` (see the module docstring), fetched through the stack for the queries the
    cache lacks, the cache saved every 50 queries (a cut-off run resumes there).

    Raises:
        EmbedderError / StoreError / asyncpg.PostgresError: from the stack.
    """
    name = database_name(db_prefix, "passage", settings)
    url = await ensure_database(server_url, name)
    path = cache_path(settings, name)
    cache = CandidateCache.load(path, name)
    legs = [PLAIN, *(rm3_name(p) for p in rm3_grid)]
    todo = [q for q in queries if not cache.has(q.query_id, legs)]
    if not todo:
        return cache
    async with (
        build_embedder(settings) as embedder,
        build_store(url, embedder.spec.name, embedder.spec.dim, settings) as store,
    ):
        await ingest_passages(docs, embedder, store, source, settings.ingest_batch_docs, progress)
        retriever = build_retriever(embedder, store, settings)
        limiter = asyncio.Semaphore(concurrency)
        feedback_docs = max((p.fb_docs for p in rm3_grid), default=0)
        done = 0

        async def collect(query: Query) -> None:
            nonlocal done
            async with limiter:
                lists = await retriever.candidate_lists(query.text, DEPTH, mode="hybrid")
                entry = {"dense": _packed(lists.dense), PLAIN: _packed(lists.full_text)}
                if rm3_grid and lists.full_text:
                    lexemes = await store.query_lexemes(query.text)
                    vectors = await store.term_vectors([h.chunk_id for h in lists.full_text[:feedback_docs]])
                    for params in rm3_grid:
                        terms = rm3_terms(lexemes, lists.full_text, vectors, params)
                        hits = await store.weighted_full_text_search(terms, DEPTH) if terms else lists.full_text
                        entry[rm3_name(params)] = _packed(hits)
                else:
                    entry |= {rm3_name(p): entry[PLAIN] for p in rm3_grid}
                cache.queries[query.query_id] = entry
            done += 1
            if done % 50 == 0:
                cache.save(path)
            if progress is not None:
                progress("candidate lists", done, len(todo))

        try:
            await asyncio.gather(*(collect(q) for q in todo))
        finally:
            cache.save(path)
    return cache


@dataclass(frozen=True)
class GridPoint:
    """One fusion setting and its metrics on the tuning queries."""

    method: str
    """`rrf`, `convex`, `full_text` (the lexical leg alone) or `dense`."""
    lexical: str
    """`bm25` or an RM3 setting's name."""
    params: dict[str, Any]
    metrics: dict[str, float]


def score(cache: CandidateCache, qrels: Qrels, ranker: Ranker, lexical: str) -> dict[str, float]:
    """Metrics of `ranker` over the cached lists of every query of `qrels`."""
    return evaluate(qrels, {q: doc_ranking(ranker(cache.lists(q, lexical))) for q in qrels})


def _fused(**kwargs: Any) -> Ranker:
    config = RetrievalConfig(mode="hybrid", **kwargs)
    return lambda lists: [h for h, _ in rank_candidates(lists, config)]


def grid_search(
    cache: CandidateCache,
    qrels: Qrels,
    lexical_legs: Sequence[str],
    rrf_k_grid: Sequence[float] = RRF_K_GRID,
    dense_weight_grid: Sequence[float] = DENSE_WEIGHT_GRID,
    alpha_grid: Sequence[float] = ALPHA_GRID,
    normalisations: Sequence[Normalisation] = NORMALISATIONS,
    progress: ProgressFn | None = None,
) -> list[GridPoint]:
    """The grid (module docstring) scored on the cached lists of `qrels`' queries, in grid order, in two stages:
    the lexical leg alone for every leg of `lexical_legs`; then the fusion grids with the plain BM25 leg and with
    the RM3 leg of the best nDCG@10 alone (ties: the first), so that the RM3 parameters are chosen by the lexical
    ranking they produce and the fusion grid runs twice, not once per RM3 setting."""
    lexical_points = [_scored(cache, qrels, GridPoint("full_text", leg, {}, {})) for leg in lexical_legs]
    feedback = [p for p in lexical_points if p.lexical != PLAIN]
    fusion_legs = [PLAIN] + ([max(feedback, key=lambda p: p.metrics["ndcg@10"]).lexical] if feedback else [])
    candidates: list[GridPoint] = []
    for lexical in fusion_legs:
        candidates += [
            GridPoint("rrf", lexical, {"rrf_k": k, "dense_weight": w, "full_text_weight": 1.0}, {})
            for k in rrf_k_grid
            for w in dense_weight_grid
        ]
        candidates += [
            GridPoint("convex", lexical, {"normalisation": n, "alpha": a}, {})
            for n in normalisations
            for a in alpha_grid
        ]
    points = list(lexical_points)
    for i, point in enumerate(candidates, 1):
        points.append(_scored(cache, qrels, point))
        if progress is not None:
            progress("fusion grid", i, len(candidates))
    return points


def _scored(cache: CandidateCache, qrels: Qrels, point: GridPoint) -> GridPoint:
    return GridPoint(point.method, point.lexical, point.params, score(cache, qrels, ranker_of(point), point.lexical))


def winners(points: Sequence[GridPoint]) -> dict[str, GridPoint]:
    """The best train nDCG@10 per method (`full_text`, `rrf`, `convex`), per method with the plain BM25 leg
    (`full_text_bm25`, `rrf_bm25`, `convex_bm25`) and per method with an RM3 leg (`full_text_rm3`, `rrf_rm3`,
    `convex_rm3`); ties go to the first point in grid order."""
    best: dict[str, GridPoint] = {}
    for point in points:
        for name in (point.method, f"{point.method}_{PLAIN if point.lexical == PLAIN else 'rm3'}"):
            if name not in best or point.metrics["ndcg@10"] > best[name].metrics["ndcg@10"]:
                best[name] = point
    return best


def ranker_of(point: GridPoint) -> Ranker:
    """The ranking function of a grid point (method `dense`: the dense list as is)."""
    if point.method == "dense":
        return lambda lists: [h for h, _ in rank_candidates(lists, RetrievalConfig(mode="dense"))]
    if point.method == "full_text":
        return lambda lists: [h for h, _ in rank_candidates(lists, RetrievalConfig(mode="full_text"))]
    if point.method == "rrf":
        return _fused(fusion="rrf", rrf_k=point.params["rrf_k"], weights=(point.params["dense_weight"], 1.0))
    return _fused(fusion="convex", alpha=point.params["alpha"], normalisation=point.params["normalisation"])


def point_json(point: GridPoint) -> dict[str, Any]:
    """A grid point as JSON."""
    return asdict(point)
