"""Any BEIR-format folder as a retrieval eval dataset (`rag eval retrieval --dataset DIR`).

The folder (Thakur et al., "BEIR", NeurIPS 2021 D&B; the layout `evals.scifact` reads):

    corpus.jsonl       {"_id": "d1", "title": "...", "text": "..."} per line (title optional)
    queries.jsonl      {"_id": "q1", "text": "..."} per line
    qrels/test.tsv     query-id <TAB> corpus-id <TAB> score, after one header line; score an integer, > 0 relevant

A query is evaluated when its id appears in the split's qrels; every such id must be in `queries.jsonl` and every
judged document in `corpus.jsonl`. Each problem raises `DatasetError` naming the file and, for a bad line, its
number.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from evals.scifact import CorpusDoc, DatasetError, Qrels, Query, jsonl_records, load_qrels

REQUIRED = ("corpus.jsonl", "queries.jsonl")


@dataclass(frozen=True)
class BeirDataset:
    """A loaded BEIR folder: its name, corpus (doc id -> document), the split's judged queries and their qrels."""

    name: str
    root: Path
    corpus: dict[str, CorpusDoc]
    queries: list[Query]
    qrels: Qrels

    def database_prefix(self) -> str:
        """Prefix of this folder's scratch databases: `rag_eval_<name>_<hash of the folder's absolute path>`, so
        two folders of the same name never share a database, and a re-run of one folder reuses its vectors."""
        slug = re.sub(r"[^a-z0-9]+", "_", self.name.lower()).strip("_")[:20] or "dataset"
        digest = hashlib.sha1(str(self.root.resolve()).encode()).hexdigest()[:8]
        return f"rag_eval_{slug}_{digest}"


def _text(value: object, path: Path, lineno: int, key: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DatasetError(f"{path}:{lineno}: '{key}' is {type(value).__name__}; expected a string")
    return value


def load_beir(root: Path, split: str = "test") -> BeirDataset:
    """Load the BEIR folder `root` for `split` (its `qrels/<split>.tsv`).

    Raises:
        DatasetError: a split that is not a plain file name; `root` is not a folder; a file is missing; a line that
            is not a UTF-8 JSON object with `_id`, or whose `title`/`text` is not a string (file:line); a qrels row
            without exactly three columns or with a non-integer score (file:line); a judged query missing from
            `queries.jsonl` or a judged document missing from `corpus.jsonl`; no judged query.
    """
    if not re.fullmatch(r"[\w.-]+", split) or split.startswith("."):
        raise DatasetError(f"split {split!r}: expected a qrels file name such as 'test' (letters, digits, _ . -)")
    if not root.is_dir():
        raise DatasetError(f"{root}: no such folder; expected a BEIR folder with {', '.join(REQUIRED)} and qrels/")
    for name in REQUIRED:
        if not (root / name).is_file():
            raise DatasetError(f"{root / name}: no such file (a BEIR folder has {', '.join(REQUIRED)} and qrels/)")
    qrels = load_qrels(split, root)
    if not qrels:
        raise DatasetError(f"{root / 'qrels' / f'{split}.tsv'}: no judgements; expected at least one row")
    corpus_path = root / "corpus.jsonl"
    corpus = {
        str(r["_id"]): CorpusDoc(
            str(r["_id"]), _text(r.get("title"), corpus_path, n, "title"), _text(r.get("text"), corpus_path, n, "text")
        )
        for n, r in jsonl_records(corpus_path)
    }
    queries_path = root / "queries.jsonl"
    queries = [
        Query(str(r["_id"]), _text(r.get("text"), queries_path, lineno, "text"))
        for lineno, r in jsonl_records(queries_path)
        if str(r["_id"]) in qrels
    ]
    missing = sorted(set(qrels) - {q.query_id for q in queries})
    if missing:
        raise DatasetError(
            f"{queries_path}: {len(missing)} queries judged in qrels/{split}.tsv are missing, e.g. {missing[:3]}"
        )
    unknown = sorted({d for docs in qrels.values() for d in docs} - set(corpus))
    if unknown:
        raise DatasetError(
            f"{root / 'corpus.jsonl'}: {len(unknown)} documents judged in qrels/{split}.tsv are missing, "
            f"e.g. {unknown[:3]}"
        )
    return BeirDataset(root.resolve().name, root, corpus, queries, qrels)
