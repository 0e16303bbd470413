"""`rag feedback list|counts|delete`: ratings of answers and what they rate (`agent.core.feedback`), in the store's
database, as the admin (every key's answers). Comments are printed as plain text (never parsed as Rich markup)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, TypeVar, cast

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.cli.opened import run_on
from agent.config.settings import Settings
from agent.core.errors import InputError
from agent.core.feedback import FeedbackDesk, parse_since, stored_feedback
from tools.feedback import MAX_LIST, Rated, Rating

T = TypeVar("T")

feedback_app = typer.Typer(
    help="Ratings of answers (up/down, comment, right source) with what they rate: list, counts per day, delete.",
    no_args_is_help=True,
)
console = Console(highlight=False)


def _with_desk(fn: Callable[[FeedbackDesk], Awaitable[T]]) -> T:
    """Run `fn` on the feedback of the configured database."""
    return run_on(lambda: stored_feedback(Settings()), lambda opened: fn(opened[0]))


def rated_json(rated: Rated) -> dict[str, object]:
    """One rating as JSON (the shape of `GET /v1/feedback`'s items; never the key that asked)."""
    r = rated.record
    return {
        "answer_id": rated.answer_id,
        "rating": rated.rating,
        "comment": rated.comment,
        "right_source": rated.right_source,
        "rated_at": rated.rated_at.isoformat(),
        "answered_at": None if r.created_at is None else r.created_at.isoformat(),
        "question": r.question,
        "answer": r.answer,
        "searches": r.searches,
        "retrieved": r.retrieved,
        "cited": r.cited,
        "support": r.support,
        "refused": r.refused,
        "cached": r.cached,
        "collections": r.collections,
        "filter": r.filter,
        "corpus_version": r.corpus_version,
        "llm_model": r.llm_model,
        "policy": r.policy,
    }


@feedback_app.command("list")
def list_feedback(
    rating: Annotated[str | None, typer.Option(help="Only `up` or only `down`.")] = None,
    since: Annotated[str | None, typer.Option(help="Only ratings from this ISO 8601 date or time (UTC) on.")] = None,
    collection: Annotated[
        list[str] | None, typer.Option("--collection", help="Only answers over this collection (repeatable).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST, help="Most ratings listed.")] = 100,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"feedback": [...]} only (as GET /v1/feedback).')
    ] = False,
) -> None:
    """Ratings, most recent first: when, up or down, the question, the cited documents, the comment."""
    if rating not in (None, "up", "down"):
        raise InputError(f"--rating {rating!r}; expected up or down")
    after = parse_since(since)
    found = _with_desk(lambda desk: desk.find(None, cast(Rating | None, rating), after, collection, limit))
    if as_json:
        print(json.dumps({"feedback": [rated_json(r) for r in found]}))
        return
    table = Table("rated at", "rating", "question", "cited", "comment", "right source", "answer id")
    for r in found:
        cited = ", ".join(dict.fromkeys(str(c["doc_id"]) for c in r.record.cited)) or (
            "refused" if r.record.refused else "-"
        )
        table.add_row(
            r.rated_at.strftime("%Y-%m-%d %H:%M"),
            r.rating,
            Text(r.record.question),
            Text(cited),
            Text(r.comment or ""),
            Text(r.right_source or ""),
            r.answer_id,
        )
    console.print(table)


@feedback_app.command("counts")
def counts(
    days: Annotated[int, typer.Option("--days", min=1, max=366, help="UTC days covered, today included.")] = 7,
    as_json: Annotated[
        bool,
        typer.Option("--json", help='Print {"days", "since", "counts": [{"day", "up", "down", "total"}], "totals"}.'),
    ] = False,
) -> None:
    """Ratings per UTC day over the last DAYS days (days without ratings left out), as GET /v1/feedback/counts."""
    since = datetime.now(UTC).date() - timedelta(days=days - 1)
    rows = _with_desk(lambda desk: desk.counts(None, since))
    up, down = sum(c.up for c in rows), sum(c.down for c in rows)
    report = {
        "days": days,
        "since": since.isoformat(),
        "counts": [c.to_json() for c in rows],
        "totals": {"up": up, "down": down, "total": up + down},
    }
    if as_json:
        print(json.dumps(report))
        return
    table = Table("day", "up", "down", "total")
    for c in rows:
        table.add_row(c.day.isoformat(), str(c.up), str(c.down), str(c.up + c.down))
    table.add_row("total", str(up), str(down), str(up + down))
    console.print(table)


@feedback_app.command("delete")
def delete(answer_id: Annotated[str, typer.Argument(help="Answer id or completion id (`rag feedback list`).")]) -> None:
    """Forget an answer: its record and its rating. Exit 1 when there is none."""
    _with_desk(lambda desk: desk.delete(answer_id))
    console.print(f"deleted the record and rating of answer {answer_id}", markup=False)
