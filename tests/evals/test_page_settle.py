"""The page-settle benchmark's pure parts: its database name, its corpus (every SciFact abstract, one chunk each) and
its summary and text report."""

from __future__ import annotations

import numpy as np

from evals.page_settle import corpus_records, page_database_name, render, summary


def test_the_page_database_is_named_after_the_store_s() -> None:
    assert page_database_name("postgresql://u@h/rag?host=/tmp") == "rag_page"
    assert len(page_database_name("postgresql://u@h/" + "x" * 80)) == 63


def test_the_corpus_is_every_scifact_abstract_with_one_unit_vector() -> None:
    records = corpus_records(8)
    assert len(records) == 5183 and len({r.doc_id for r in records}) == 5183
    assert all(len(r.chunks) == 1 and r.title for r in records[:50])
    assert np.isclose(np.linalg.norm(records[0].chunks[0].embedding), 1.0)
    assert corpus_records(8)[7].chunks[0].embedding.tolist() == records[7].chunks[0].embedding.tolist()  # seeded


def test_the_report_gives_p50_and_max_against_the_target() -> None:
    figure = summary([300.0, 100.0, 200.0])
    assert figure == {"p50": 200.0, "max": 300.0, "n": 3}
    report = {
        "documents": 5183,
        "runs": 3,
        "settle_ms": figure,
        "last_page_ms": figure,
        "search_ms": figure,
        "target_settle_ms": 1000.0,
        "meets_target": True,
    }
    text = render(report)
    assert "5183 documents" in text and "settle        p50   200.0 ms   max   300.0 ms" in text
    assert "meets the target of 1000 ms" in text
