"""The SciFact retrieval eval's pieces: dataset loaders, metrics against hand-computed values, document ranking,
eval database names, CLI argument checks. No server (the CI-size run is in test_retrieval_eval.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from agent.config.settings import Settings
from evals.metrics import evaluate, ranked_to_scores
from evals.retrieval_eval import database_name, doc_ranking, with_database
from evals.scifact import DatasetError, load_corpus, load_qrels, load_queries
from tools.records import ChunkHit


def test_scifact_loaders_match_the_published_sizes() -> None:
    corpus = load_corpus()
    test, train = load_queries("test"), load_queries("train")
    assert (len(corpus), len(test), len(train)) == (5183, 300, 809)
    qrels = load_qrels("test")
    assert sum(len(d) for d in qrels.values()) == 339
    assert all(doc in corpus for docs in qrels.values() for doc in docs)
    claim = next(q for q in train if q.query_id == "2")  # "1 in 5 million in UK have abnormal PrP positivity."
    assert [(e.doc_id, e.label, e.sentences) for e in claim.evidence] == [("13734012", "CONTRADICT", (4,))]


def test_loader_names_a_malformed_line(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text('{"_id": "1", "text": "a"}\n{not json}\n')
    with pytest.raises(DatasetError, match=r"corpus.jsonl:2: invalid JSON"):
        load_corpus(tmp_path)


def test_metrics_match_hand_computed_values() -> None:
    qrels = {"q1": {"a": 1, "b": 1}, "q2": {"c": 1}, "q3": {"d": 1}}
    run = {"q1": ["x", "a", "y", "b"], "q2": ["c"]}  # q3 retrieved nothing: it scores 0
    got = evaluate(qrels, run)
    ndcg_q1 = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert got["ndcg@10"] == pytest.approx((ndcg_q1 + 1.0 + 0.0) / 3)
    assert got["recall@10"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert got["mrr@10"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    # relevant documents past rank 10 count for recall@100 only
    deep = {"q1": [f"n{i}" for i in range(10)] + ["a"]}
    got = evaluate({"q1": {"a": 1}}, deep)
    assert (got["recall@10"], got["recall@100"], got["mrr@10"]) == (0.0, 1.0, 0.0)


def test_metrics_keep_our_order_and_reject_bad_runs() -> None:
    assert ranked_to_scores(["b", "a"]) == {"b": 2.0, "a": 1.0}
    with pytest.raises(ValueError, match="twice"):
        ranked_to_scores(["a", "a"])
    with pytest.raises(ValueError, match="without qrels"):
        evaluate({"q1": {"a": 1}}, {"q9": ["a"]})


def test_doc_ranking_scores_a_document_by_its_best_chunk() -> None:
    hits = [ChunkHit(c, c.split("#")[0], "", "", "", 0.0) for c in ["d1#2", "d2#0", "d1#0", "d3#1"]]
    assert doc_ranking(hits) == ["d1", "d2", "d3"]
    assert doc_ranking(hits, depth=2) == ["d1", "d2"]


def test_eval_database_names_and_urls() -> None:
    settings = Settings(_env_file=None, chunk_tokens=200, chunk_overlap_tokens=40)  # type: ignore[call-arg]
    assert database_name("p", "chunked", settings) == "p_chunked_all_minilm_l6_v2_c200_o40"
    assert with_database("postgresql://u:@/postgres?host=/tmp/x", "e") == "postgresql://u:@/e?host=/tmp/x"


def test_cli_refuses_an_unknown_split() -> None:
    result = CliRunner().invoke(app, ["eval", "retrieval", "--split", "dev"])
    assert result.exit_code == 1
    assert "--split 'dev'" in result.stderr
