"""The BEIR folder loader behind `rag eval retrieval --dataset`: a valid folder loads, and each malformed or missing
file is refused naming the file and, for a bad line, its number. Pure file handling, no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.beir import load_beir
from evals.scifact import DatasetError

CORPUS = [
    {"_id": "d1", "title": "Zebras", "text": "Zebras have black and white stripes."},
    {"_id": "d2", "text": "Espresso is brewed by forcing hot water through coffee."},
    {"_id": "d3", "title": "Volcanoes", "text": "Lava erupts from volcanoes."},
]
QUERIES = [{"_id": "q1", "text": "why are zebras striped"}, {"_id": "q2", "text": "how is espresso made"}]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n"


def beir_folder(root: Path, corpus: str | None = None, queries: str | None = None, qrels: str | None = None) -> Path:
    """A BEIR folder under `root` with the valid files above, any of them replaced by the text given."""
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(corpus if corpus is not None else "".join(json.dumps(d) + "\n" for d in CORPUS))
    (root / "queries.jsonl").write_text(
        queries if queries is not None else "".join(json.dumps(q) + "\n" for q in QUERIES)
    )
    (root / "qrels" / "test.tsv").write_text(qrels if qrels is not None else QRELS)
    return root


def test_a_valid_folder_loads(tmp_path: Path) -> None:
    data = load_beir(beir_folder(tmp_path / "my-set"))
    assert data.name == "my-set"
    assert [d.content for d in data.corpus.values()][:2] == [
        "Zebras\n\nZebras have black and white stripes.",
        "Espresso is brewed by forcing hot water through coffee.",
    ]
    assert [(q.query_id, q.text) for q in data.queries] == [
        ("q1", "why are zebras striped"),
        ("q2", QUERIES[1]["text"]),
    ]
    assert data.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    assert data.database_prefix().startswith("rag_eval_my_set_")
    assert data.database_prefix() != load_beir(beir_folder(tmp_path / "other" / "my-set")).database_prefix()


@pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_a_missing_file_is_named(tmp_path: Path, missing: str) -> None:
    root = beir_folder(tmp_path / "set")
    (root / missing).unlink()
    with pytest.raises(DatasetError, match=rf"set/{missing}: no such file"):
        load_beir(root)
    with pytest.raises(DatasetError, match="no such folder"):
        load_beir(tmp_path / "absent")


def test_bad_json_names_the_file_and_line(tmp_path: Path) -> None:
    corpus = json.dumps(CORPUS[0]) + "\n\n" + '{"_id": "d2", "text": "unterminated\n'
    with pytest.raises(DatasetError, match=r"corpus\.jsonl:3: invalid JSON"):
        load_beir(beir_folder(tmp_path / "a", corpus=corpus))
    queries = json.dumps(QUERIES[0]) + "\n" + json.dumps({"text": "no id"}) + "\n"
    with pytest.raises(DatasetError, match=r"queries\.jsonl:2: expected a JSON object with '_id'"):
        load_beir(beir_folder(tmp_path / "b", queries=queries))
    corpus = json.dumps(CORPUS[0]) + "\n" + json.dumps({"_id": "d2", "text": ["a", "list"]}) + "\n"
    with pytest.raises(DatasetError, match=r"corpus\.jsonl:2: 'text' is list; expected a string"):
        load_beir(beir_folder(tmp_path / "c", corpus=corpus))


@pytest.mark.parametrize(
    ("row", "why"), [("q2\td2", "2 columns"), ("q2\td2\t1\textra", "4 columns"), ("q2\td2\thigh", "invalid literal")]
)
def test_a_bad_qrels_row_names_the_file_and_line(tmp_path: Path, row: str, why: str) -> None:
    qrels = f"query-id\tcorpus-id\tscore\nq1\td1\t1\n{row}\n"
    with pytest.raises(DatasetError, match=rf"qrels/test\.tsv:3: expected 'query-id<TAB>corpus-id<TAB>score'.*{why}"):
        load_beir(beir_folder(tmp_path / "set", qrels=qrels))


def test_judgements_must_name_known_queries_and_documents(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"queries\.jsonl: 1 queries judged in qrels/test\.tsv are missing.*q9"):
        load_beir(beir_folder(tmp_path / "a", qrels=QRELS + "q9\td1\t1\n"))
    with pytest.raises(DatasetError, match=r"corpus\.jsonl: 1 documents judged in qrels/test\.tsv are missing.*d9"):
        load_beir(beir_folder(tmp_path / "b", qrels=QRELS + "q1\td9\t1\n"))
    with pytest.raises(DatasetError, match="no judgements"):
        load_beir(beir_folder(tmp_path / "c", qrels="query-id\tcorpus-id\tscore\n"))
    with pytest.raises(DatasetError, match=r"split '\.\./x'"):
        load_beir(beir_folder(tmp_path / "d"), split="../x")
