"""The format-fidelity eval's pure parts, without servers: the SciFact subset, stored ids back to SciFact ids, the
word-fidelity measure, the renderings, and the README tables rendered from their results files."""

from __future__ import annotations

import json
from pathlib import Path

from evals.extract_bench import word_ratio
from evals.fidelity import _scifact_id, merge_results, printed_page, subset
from evals.readme_tables import RESULTS_DIR, TABLES
from evals.render_docs import article_html, write_docx
from evals.scifact import load_corpus
from tools.extract import extract, sniff


def test_subset_holds_every_gold_abstract_of_its_claims() -> None:
    chosen = subset(claims=10, distractors=5)
    ids = {d.doc_id for d in chosen.docs}
    assert len(chosen.queries) == 10 and set(chosen.qrels) == set(chosen.queries)
    assert all(set(gold) <= ids for gold in chosen.qrels.values())
    assert len(ids) == len(chosen.docs) >= 10


def test_rendered_file_ids_map_back_to_scifact_ids() -> None:
    assert [_scifact_id(i) for i in ("4983.pdf", "html/4983.html", "4983")] == ["4983", "4983", "4983"]


def test_word_ratio_is_one_for_the_same_words_and_drops_with_boilerplate() -> None:
    assert word_ratio("Vitamin B12, and homocysteine.", "vitamin b12 AND homocysteine") == 1.0
    assert word_ratio("a b c d", "a b c d Cookie settings Privacy policy") < 0.7


def test_renderings_extract_to_the_source_words(tmp_path: Path) -> None:
    doc = next(iter(load_corpus().values()))  # a real abstract (a page of one sentence keeps its navigation)
    page = tmp_path / "42.html"
    page.write_text(article_html(doc, boilerplate=True))
    write_docx(doc, tmp_path / "42.docx")
    for path in (page, tmp_path / "42.docx"):
        got = extract(path, sniff(path), 10_000_000)
        assert word_ratio(f"{doc.title} {doc.text}", got.text) == 1.0, got.text
        assert "Cookie" not in got.text and got.title.strip() == doc.title.strip()


def test_fidelity_and_extraction_tables_render_from_their_results() -> None:
    fidelity = json.loads((RESULTS_DIR / "fidelity.json").read_text())
    table = TABLES["fidelity"].render(fidelity)
    assert "| pdf | " in table and "PDF page check" in table
    bench = json.loads((RESULTS_DIR / "extract-bench.json").read_text())
    assert "| PDF | pypdfium2 |" in TABLES["extract-bench"].render(bench)


def test_a_run_of_some_formats_updates_their_rows_and_takes_deltas_against_its_own_jsonl() -> None:
    protocol = {"claims": 2, "documents": 3, "embedder_model": "m", "retrieval_mode": "hybrid", "chunk_tokens": 200,
                "chunk_overlap_tokens": 40}  # fmt: skip
    row = {"documents": 3, "chunks": 5, "chunks_per_s": 1.0}
    earlier = protocol | {
        "date": "2026-12-01",
        "target_delta": 0.01,
        "formats": {"jsonl": row | {"ndcg@10": 0.9}, "pdf": row | {"ndcg@10": 0.9}},
        "page_check": {"pages": 12, "chunks": 5, "located": 5, "page_correct": 5},
    }
    new = protocol | {
        "date": "2026-12-04",
        "target_delta": 0.01,
        "formats": {
            "jsonl": row | {"ndcg@10": 0.91, "date": "2026-12-04"},
            "scanned": row | {"ndcg@10": 0.895, "ocr_pages": 3, "ocr_pages_per_s": 0.5},
        },
        "page_check_scanned": {"pages": 20, "chunks": 5, "located": 5, "page_correct": 5},
    }
    merged = merge_results(earlier, new)
    assert list(merged["formats"]) == ["jsonl", "pdf", "scanned"]
    assert merged["formats"]["pdf"]["date"] == "2026-12-01" and merged["formats"]["pdf"]["delta_vs_jsonl"] == -0.01
    scanned = merged["formats"]["scanned"]
    assert (scanned["delta_vs_jsonl"], scanned["target_delta"], scanned["within_target"]) == (-0.015, 0.02, True)
    assert merged["page_check"]["pages"] == 12 and merged["page_check_scanned"]["pages"] == 20
    table = TABLES["fidelity"].render(merged)
    assert "met (target 0.02)" in table and "(OCR 0.5 pages/s)" in table and "scanned PDF page check (OCR)" in table


def test_a_chunk_is_located_by_its_head_or_despite_an_ocr_misread_by_its_words() -> None:
    sources = ["Zebrafish tanks need clean water every week of the year", "Numbats eat termites at dawn in forests"]
    assert printed_page("Numbats eat  termites", sources) == 2
    assert printed_page("Zebraflsh tanks need clean water every week of the year", sources) == 1  # one word misread
    assert printed_page("Quokkas live on islands", sources) is None
