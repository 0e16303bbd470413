"""`rag eval retrieval --dataset DIR` end to end: a tiny BEIR folder evaluated through the real Triton embedder and
Postgres, in a scratch database of its own, resumed on a second run; a malformed folder fails naming file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.config.settings import Settings
from tests.conftest import run_cli

pytestmark = pytest.mark.stack

DOCS = {
    "zebra": ("Zebra stripes", "Zebras are African equines with distinctive black and white striped coats."),
    "espresso": ("Espresso", "Espresso coffee is brewed by forcing hot water under pressure through ground beans."),
    "volcano": ("Volcanoes", "A volcano erupts when molten rock, ash and gases escape from a magma chamber."),
    "penguin": ("Penguins", "Penguins are flightless seabirds of the southern hemisphere that swim with flippers."),
    "bridge": ("Suspension bridges", "A suspension bridge hangs its deck from cables strung between tall towers."),
    "insulin": ("Insulin", "Insulin is a pancreatic hormone that lets cells take up glucose from the blood."),
    "chess": ("Chess openings", "The Sicilian Defence answers the king's pawn opening with the c-pawn."),
    "glacier": ("Glaciers", "Glaciers are slow rivers of ice that carve valleys as they move downhill."),
    "violin": ("Violins", "A violin is a bowed string instrument with four strings tuned in fifths."),
    "tides": ("Tides", "Ocean tides rise and fall with the gravitational pull of the moon and the sun."),
}
QUERIES = {
    "q1": ("why do zebras have black and white stripes", "zebra"),
    "q2": ("how is espresso coffee brewed", "espresso"),
    "q3": ("what makes a volcano erupt", "volcano"),
    "q4": ("which hormone controls blood glucose", "insulin"),
}


def tiny_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, (t, x) in DOCS.items())
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, (t, _) in QUERIES.items())
    )
    rows = "".join(f"{q}\t{doc}\t1\n" for q, (_, doc) in QUERIES.items())
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return root


def test_a_beir_folder_is_evaluated_in_its_own_database_and_resumed(
    settings: Settings, postgres_url: str, triton_server: Settings, tmp_path: Path
) -> None:
    root = tiny_beir(tmp_path / "tiny-set")
    args = ["eval", "retrieval", "--dataset", str(root), "--variant", "passage", "--json"]
    first = run_cli(settings, *args, "--output", str(tmp_path / "first.json"))
    assert first.returncode == 0, first.stderr
    assert "embed passages" in first.stderr  # the progress display's last state
    report = json.loads(first.stdout)
    passage = report["variants"]["passage"]
    assert report["n_queries"] == len(QUERIES)
    assert (passage["n_docs"], passage["n_chunks"]) == (len(DOCS), len(DOCS))
    assert passage["database"].startswith("rag_eval_tiny_set_")
    for mode in ("dense", "full_text", "hybrid"):
        # each query names its document's topic: every mode ranks it first
        assert report[mode]["ndcg@10"] == pytest.approx(1.0), mode
        assert report[mode]["recall@10"] == 1.0
    again = run_cli(settings, *args, "--output", str(tmp_path / "again.json"))
    assert again.returncode == 0, again.stderr
    resumed = json.loads(again.stdout)
    assert "embed passages" not in again.stderr  # every document already stored: nothing embedded again
    assert resumed["variants"]["passage"]["database"] == passage["database"]
    assert {m: resumed[m] for m in ("dense", "full_text", "hybrid")} == {
        m: report[m] for m in ("dense", "full_text", "hybrid")
    }


def test_a_malformed_folder_fails_naming_the_file_and_line(settings: Settings, tmp_path: Path) -> None:
    root = tiny_beir(tmp_path / "broken")
    with (root / "qrels" / "test.tsv").open("a") as handle:
        handle.write("q1\tzebra\n")
    result = run_cli(settings, "eval", "retrieval", "--dataset", str(root))
    assert result.returncode == 1
    assert f"qrels/test.tsv:{len(QUERIES) + 2}: expected 'query-id<TAB>corpus-id<TAB>score'" in result.stderr
