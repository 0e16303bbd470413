"""`rag bench query --filter-selectivity`: which documents are tagged (pure), and a tiny run against the real
Postgres and Triton that leaves the user's store untouched."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg
import pytest

from agent.config.settings import Settings
from evals.bench_filters import chosen_documents, tag_key, tagged
from tests.conftest import run_cli
from tests.store_helpers import record


def test_chosen_documents_reach_each_share_of_chunks() -> None:
    per_document = {f"d{i}": 1 + i % 3 for i in range(1000)}  # 1,999 chunks
    total = sum(per_document.values())
    chosen = chosen_documents(per_document, (0.01, 0.001, 1.0))
    for share, ids in chosen.items():
        held = sum(per_document[d] for d in ids)
        assert share * total <= held < share * total + 3  # the last document taken has at most 3 chunks
    assert chosen[1.0] == set(per_document)
    assert chosen_documents(per_document, (0.01,)) == {0.01: chosen[0.01]}  # seeded: the same every run
    assert len(chosen_documents({"a": 5, "b": 5}, (0.0001,))[0.0001]) == 1  # at least one document


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_a_share_outside_0_1_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match=f"--filter-selectivity {bad}"):
        chosen_documents({"a": 1}, (bad,))


def test_tagging_adds_keys_and_keeps_the_metadata() -> None:
    doc = record("a", ["x"])
    doc = type(doc)(doc.doc_id, doc.title, doc.source, doc.content_hash, doc.chunks, {"team": "bio"})
    assert tagged(doc, {0.01: {"a"}, 0.001: set()}).metadata == {"team": "bio", tag_key(0.01): True}
    assert tagged(doc, {0.01: {"b"}}) is doc
    assert tag_key(0.001) == "bench_match_0.001"


@pytest.mark.stack
async def test_filtered_bench_reports_recall_and_latency_on_a_tagged_copy(
    ingested: str, settings: Settings, tmp_path: Path
) -> None:
    args = ["bench", "query", "--json", "--requests", "5", "--filter-selectivity", "0.1,0.02"]
    result = run_cli(settings, *args, "--plot", str(tmp_path / "f.png"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    filtered = report["filtered"]
    assert filtered["database"] != ingested and filtered["chunks"] > 0
    assert [p["selectivity"] for p in filtered["points"]] == [0.1, 0.02]
    for p in filtered["points"]:
        assert p["selectivity"] * filtered["chunks"] <= p["matching_chunks"]
        for leg in ("dense", "full_text"):
            assert p[leg]["p50_ms"] > 0 and p[leg]["unfiltered_p50_ms"] > 0
        assert p["dense"]["recall_at_10"] == 1.0  # below the exact-ranking threshold
    assert (tmp_path / "f.png").stat().st_size > 0
    conn = await asyncpg.connect(ingested)
    try:  # the user's store gained no tag
        assert not await conn.fetchval("SELECT count(*) FROM documents WHERE metadata::text LIKE '%bench_match%'")
    finally:
        await conn.close()
    again = run_cli(settings, *args)  # reuses the complete copy
    assert again.returncode == 0 and "reusing" in again.stderr
