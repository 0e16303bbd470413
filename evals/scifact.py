"""Loaders for BEIR-layout datasets, with SciFact's claim evidence labels.

BEIR layout (Thakur et al., "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation of IR Models", NeurIPS 2021
D&B): `corpus.jsonl` (`{"_id", "title", "text", "metadata"}` per line), `queries.jsonl` (`{"_id", "text",
"metadata"}`), `qrels/<split>.tsv` (`query-id  corpus-id  score`, one header line). A query belongs to a split when
its id appears in that split's qrels (all 809 SciFact train and 300 test claims do). SciFact's `queries.jsonl`
metadata maps each cited doc id to its evidence: `[{"sentences": [int, ...], "label": "SUPPORT" | "CONTRADICT"}]`
(Wadden et al., "Fact or Fiction: Verifying Scientific Claims", EMNLP 2020).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tools.jsonl import JsonlError, read_records

SCIFACT_DIR = Path(__file__).resolve().parent / "datasets" / "scifact"
"""The SciFact copy shipped with the project (see its SOURCE.txt), package data of `evals`."""

Split = Literal["train", "test"]
EvidenceLabel = Literal["SUPPORT", "CONTRADICT"]


class DatasetError(ValueError):
    """A dataset file is missing or malformed (names the file and line)."""


@dataclass(frozen=True)
class CorpusDoc:
    """One corpus document: BEIR's document text is `title + " " + text` (see `content`)."""

    doc_id: str
    title: str
    text: str

    @property
    def content(self) -> str:
        """Title and text as one passage, in the same form as `tools.ingest.SourceDocument.content`."""
        return f"{self.title}\n\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class Evidence:
    """A claim's evidence in one abstract: its label and the rationale sentence indices (from 0)."""

    doc_id: str
    label: EvidenceLabel
    sentences: tuple[int, ...]


@dataclass(frozen=True)
class Query:
    """One query (a SciFact claim) with its evidence; empty evidence means NOT ENOUGH INFO."""

    query_id: str
    text: str
    evidence: tuple[Evidence, ...] = ()


Qrels = dict[str, dict[str, int]]
"""query id -> {doc id: relevance grade} (SciFact grades are all 1)."""


def jsonl_records(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    """(line number, record) of each non-blank line of `path` (`tools.jsonl.read_records`).

    Raises:
        DatasetError: missing file, or a line that is not UTF-8 JSON object with `_id` (names file:line).
    """
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    try:
        yield from read_records(path)
    except JsonlError as exc:
        raise DatasetError(str(exc)) from exc


def load_corpus(root: Path = SCIFACT_DIR) -> dict[str, CorpusDoc]:
    """doc id -> document, in file order, from `root/corpus.jsonl`.

    Raises:
        DatasetError: missing file, invalid JSON, or a record without `_id`.
    """
    return {
        str(r["_id"]): CorpusDoc(str(r["_id"]), str(r.get("title") or ""), str(r.get("text") or ""))
        for _, r in jsonl_records(root / "corpus.jsonl")
    }


def load_qrels(split: str, root: Path = SCIFACT_DIR) -> Qrels:
    """Relevance judgements of `split` from `root/qrels/<split>.tsv`.

    Raises:
        DatasetError: missing file or a row that is not `query-id, corpus-id, integer score`.
    """
    path = root / "qrels" / f"{split}.tsv"
    if not path.is_file():
        raise DatasetError(f"{path}: no such file (split {split!r})")
    qrels: Qrels = {}
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        next(reader, None)  # header
        for lineno, row in enumerate(reader, 2):
            if not row:
                continue
            try:
                if len(row) != 3:
                    raise ValueError(f"{len(row)} columns")
                query_id, doc_id, score = row[0], row[1], int(row[2])
            except ValueError as exc:
                raise DatasetError(
                    f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>score' (3 columns, integer score), got "
                    f"{row} ({exc})"
                ) from exc
            qrels.setdefault(query_id, {})[doc_id] = score
    return qrels


def load_queries(split: Split, root: Path = SCIFACT_DIR) -> list[Query]:
    """Queries of `split` (ids present in `qrels/<split>.tsv`), in file order, with their evidence labels.

    Raises:
        DatasetError: missing file, invalid JSON, malformed evidence metadata, or a qrels query missing from
            `queries.jsonl`.
    """
    wanted = load_qrels(split, root)
    path = root / "queries.jsonl"
    queries: list[Query] = []
    for lineno, record in jsonl_records(path):
        query_id = str(record["_id"])
        if query_id not in wanted:
            continue
        metadata = record.get("metadata") or {}
        try:
            assert isinstance(metadata, dict)
            evidence = tuple(
                Evidence(str(doc_id), item["label"], tuple(int(s) for s in item["sentences"]))
                for doc_id, items in metadata.items()
                for item in items
            )
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"{path}:{lineno}: malformed evidence metadata: {exc!r}") from exc
        queries.append(Query(query_id, str(record.get("text") or ""), evidence))
    missing = set(wanted) - {q.query_id for q in queries}
    if missing:
        raise DatasetError(f"{path}: {len(missing)} {split} qrels queries are missing, e.g. {sorted(missing)[:3]}")
    return queries


def gold_doc_ids(split: Split, root: Path = SCIFACT_DIR) -> dict[str, set[str]]:
    """Claim id -> ids of its relevant (gold) abstracts in `split`'s qrels.

    Raises:
        DatasetError: as `load_qrels`.
    """
    return {query_id: set(docs) for query_id, docs in load_qrels(split, root).items()}


def claim_texts(split: Split, root: Path = SCIFACT_DIR) -> dict[str, str]:
    """Claim id -> claim text of every query of `split`, in file order.

    Raises:
        DatasetError: as `load_queries`.
    """
    return {q.query_id: q.text for q in load_queries(split, root)}


SentenceSpans = dict[str, list[tuple[int, int]]]
"""doc id -> (start, end) character offsets of each abstract sentence in the document's `text` (end exclusive)."""


def load_sentence_spans(root: Path = SCIFACT_DIR) -> SentenceSpans:
    """The abstracts' sentence boundaries from `root/sentences.jsonl` (see its section in `SOURCE.txt`): sentence
    index i of a claim's evidence in document d is `corpus[d].text[start_i:end_i]`.

    Raises:
        DatasetError: missing file, invalid JSON, or a record whose `sentences` is not a list of [start, end] pairs.
    """
    path = root / "sentences.jsonl"
    spans: SentenceSpans = {}
    for lineno, record in jsonl_records(path):
        try:
            items = record["sentences"]
            assert isinstance(items, list)
            spans[str(record["_id"])] = [(int(start), int(end)) for start, end in items]
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"{path}:{lineno}: expected 'sentences': [[start, end], ...]: {exc!r}") from exc
    return spans


def abstract_sentences(doc: CorpusDoc, spans: SentenceSpans) -> list[str]:
    """The sentences of `doc`'s abstract, in order (index i is SciFact's rationale sentence i).

    Raises:
        DatasetError: `spans` has no entry for the document.
    """
    try:
        return [doc.text[start:end] for start, end in spans[doc.doc_id]]
    except KeyError:
        raise DatasetError(f"sentences.jsonl has no sentence spans for document {doc.doc_id!r}") from None
