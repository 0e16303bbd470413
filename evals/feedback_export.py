"""`rag eval export-feedback DIR`: rated answers turned into regression tests (docs/feedback.md).

DIR receives:

    corpus.jsonl       the documents involved (retrieved, cited, named as the right source), read from the store
    queries.jsonl      one query per rated answer: `_id` the answer id, `text` the query it searched (its first
                       search; the question when none), `metadata` the question and the rating
    qrels/test.tsv     judged documents: the up-voted answers' cited documents (score 1) and the "right source"
                       corrections (score 2); `rag eval retrieval --dataset DIR` evaluates the judged queries
    cases.yaml         one answer case per rated answer (`evals.answers_eval`, pydantic-evals' format) for
                       `rag eval answers --cases DIR/cases.yaml`: the question, the expected sources (the qrels'
                       documents), and the rated answer (its rating, comment, what was wrong, retrieved and cited ids,
                       refusal), against which each run reports what changed
    export.json        what was written (counts, documents not found)

Nothing of the API keys is exported: neither the key that asked (the records' owner) nor any token.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic_evals import Case

from agent.config.settings import Settings
from agent.core.feedback import stored_feedback
from evals.answers_eval import (
    AnswerDataset,
    CitationEvaluator,
    ClaimInputs,
    ClaimMetadata,
    RatedAnswer,
    RatedAnswerEvaluator,
    SupportEvaluator,
    VerdictEvaluator,
)
from tools.feedback import MAX_LIST, Rated, Rating
from tools.scope import SearchScope

DocumentReader = Callable[[str, Sequence[str]], Awaitable[tuple[str, str] | None]]
"""(doc id, the collections it may be in) -> (title, text) of the stored document, None when it is gone."""

_CHUNK = re.compile(r"^(?:(?P<collection>[^:]+)::)?(?P<doc>.+)#\d+$")


def doc_id_of(source: str) -> str:
    """The document id of a "right source": a doc id as given, or a chunk id's document (`<doc>#<n>`,
    `<collection>::<doc>#<n>`)."""
    match = _CHUNK.match(source.strip())
    return match["doc"] if match else source.strip()


def expected_sources(rated: Rated) -> dict[str, int]:
    """Judged documents of a rating: the right source (2), and for an up-vote its cited documents (1)."""
    judged: dict[str, int] = {}
    if rated.rating == "up":
        for cited in rated.record.cited:
            judged[str(cited["doc_id"])] = 1
    if rated.right_source:
        judged[doc_id_of(rated.right_source)] = 2
    return judged


def what_was_wrong(rated: Rated) -> str | None:
    """For a down-vote, what its rating says was wrong, in words; None for an up-vote."""
    if rated.rating != "down":
        return None
    parts = []
    if rated.comment:
        parts.append(f"comment: {rated.comment}")
    if rated.right_source:
        parts.append(f"the right source is {rated.right_source}")
    if rated.record.refused:
        parts.append("it refused (no passage relevant enough)")
    cited = sorted({str(c["doc_id"]) for c in rated.record.cited})
    if cited:
        parts.append(f"it cited {', '.join(cited)}")
    return "; ".join(parts) or "down-voted without a comment"


def case_of(rated: Rated) -> Case[ClaimInputs, Any, ClaimMetadata]:
    """The answer case of one rating (`evals.answers_eval`)."""
    record = rated.record
    query = record.searches[0] if record.searches else None
    metadata = ClaimMetadata(
        gold_verdict=None,
        gold_doc_ids=list(expected_sources(rated)),
        rated=RatedAnswer(
            answer_id=rated.answer_id,
            rating=rated.rating,
            comment=rated.comment,
            right_source=rated.right_source,
            what_was_wrong=what_was_wrong(rated),
            answer=record.answer,
            refused=record.refused,
            cited_doc_ids=list(dict.fromkeys(str(c["doc_id"]) for c in record.cited)),
            cited_chunk_ids=[str(c["chunk_id"]) for c in record.cited],
            retrieved_chunk_ids=[str(p["chunk_id"]) for p in record.retrieved],
            rated_at=rated.rated_at.isoformat(),
            llm_model=record.llm_model,
            corpus_version=record.corpus_version,
        ),
    )
    inputs = ClaimInputs(
        claim=record.question,
        question=record.question,
        retrieval_query=query if query and query != record.question else None,
    )
    return Case(name=rated.answer_id, inputs=inputs, metadata=metadata)


async def read_corpus(
    ratings: Sequence[Rated], read_document: DocumentReader
) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """The documents involved in `ratings` (retrieved, cited, named as the right source) as doc id -> (title, text),
    read from the store within each record's collections, and the ids no longer stored."""
    wanted: dict[str, set[str]] = {}
    for rated in ratings:
        involved = [str(p["doc_id"]) for p in rated.record.retrieved] + [str(c["doc_id"]) for c in rated.record.cited]
        for doc_id in [*involved, *expected_sources(rated)]:
            wanted.setdefault(doc_id, set()).update(rated.record.collections)
    corpus: dict[str, tuple[str, str]] = {}
    for doc_id, collections in sorted(wanted.items()):
        found = await read_document(doc_id, sorted(collections))
        if found is not None:
            corpus[doc_id] = found
    return corpus, sorted(set(wanted) - set(corpus))


def write_export(
    ratings: Sequence[Rated], corpus: dict[str, tuple[str, str]], missing: Sequence[str], out: Path
) -> dict[str, Any]:
    """Write the BEIR folder and the case file of `ratings` into `out` (module docstring); returns the summary
    written to `export.json`."""
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for doc_id, (title, text) in corpus.items():
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}, ensure_ascii=False) + "\n")
    judged = 0
    with (
        (out / "queries.jsonl").open("w", encoding="utf-8") as queries,
        (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as qrels,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for rated in ratings:
            record = rated.record
            text = record.searches[0] if record.searches else record.question
            metadata = {"question": record.question, "rating": rated.rating}
            queries.write(json.dumps({"_id": rated.answer_id, "text": text, "metadata": metadata}) + "\n")
            rows = [(doc_id, score) for doc_id, score in expected_sources(rated).items() if doc_id in corpus]
            judged += bool(rows)
            for doc_id, score in rows:
                qrels.write(f"{rated.answer_id}\t{doc_id}\t{score}\n")
    dataset = AnswerDataset(
        name="feedback",
        cases=[case_of(r) for r in ratings],
        evaluators=[VerdictEvaluator(), CitationEvaluator(), SupportEvaluator(), RatedAnswerEvaluator()],
    )
    dataset.to_file(out / "cases.yaml")
    summary = {
        "ratings": len(ratings),
        "up": sum(r.rating == "up" for r in ratings),
        "down": sum(r.rating == "down" for r in ratings),
        "queries": len(ratings),
        "judged_queries": judged,
        "documents": len(corpus),
        "missing_documents": list(missing),
        "dir": str(out),
    }
    (out / "export.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


async def export_from_store(
    out: Path,
    settings: Settings,
    rating: Rating | None = None,
    since: datetime | None = None,
    collections: Sequence[str] | None = None,
) -> dict[str, Any]:
    """`rag eval export-feedback`: every rating of the configured database (the admin's view; filtered by rating,
    time and collections) exported into `out`, documents read from the same store."""
    async with stored_feedback(settings) as (desk, store):
        ratings = await desk.find(None, rating, since, collections, MAX_LIST)
        ratings.reverse()  # oldest first: case order follows the ratings

        async def read(doc_id: str, names: Sequence[str]) -> tuple[str, str] | None:
            return await store.get_document(doc_id, SearchScope(collections=tuple(names)) if names else None)

        corpus, missing = await read_corpus(ratings, read)
    return await asyncio.to_thread(write_export, ratings, corpus, missing, out)
