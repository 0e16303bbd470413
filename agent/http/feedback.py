"""The feedback routes: rate an answer, read, count and delete ratings (`agent.core.feedback`, docs/feedback.md).

- `POST /v1/feedback` `{"answer_id" | "response_id", "rating": "up" | "down", "comment"?, "right_source"?}`: rate
  an answer of `/v1/ask` (its `answer_id`) or of the OpenAI-compatible route (its completion id `chatcmpl-...`, as
  `response_id` or `answer_id`); a second rating replaces the first. The same for OpenAI-route clients:
  `POST /v1/chat/completions/{completion_id}/feedback` `{"rating", "comment"?, "right_source"?}`.
- `GET /v1/feedback?rating=&since=&collection=&limit=`: ratings with what they rate, most recent first.
- `GET /v1/feedback/counts?days=N`: ratings per UTC day (as `GET /v1/usage`).
- `GET /v1/feedback/{answer_id}`, `DELETE /v1/feedback/{answer_id}`: one rating; deleting forgets the answer's record
  and its rating.

Owners: an answer belongs to the API key that asked. A key holder rates, reads and deletes only its own answers:
another key's answer is the same 404 `answer_not_found` as a missing one. The admin sees and rates every answer.
Comments are stored as text and returned as JSON strings, never as HTML; a NUL character, or a comment over 2000
characters, is a 422 naming the field.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, Field, field_validator, model_validator

from agent.core.feedback import answer_id_of
from agent.http.ask import no_nul
from agent.http.deps import CALLER, Caller, Rag
from agent.http.errors import ERROR_RESPONSES, ErrorBody
from tools.feedback import MAX_COMMENT_CHARS, MAX_LIST, MAX_SOURCE_CHARS, Rated, Rating

router = APIRouter(dependencies=[CALLER], responses=ERROR_RESPONSES, tags=["feedback"])
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "`answer_not_found`: no such answer of this API key."}
}
MAX_DAYS = 366


class RatingIn(BaseModel):
    """A rating: up or down, an optional comment and the source that should have answered."""

    rating: Rating = Field(description="`up` or `down`.")
    comment: Annotated[
        str | None,
        Field(max_length=MAX_COMMENT_CHARS, description="What was good or wrong; plain text, no NUL."),
    ] = None
    right_source: Annotated[
        str | None,
        Field(
            max_length=MAX_SOURCE_CHARS,
            description="The document id (or chunk id, `<doc_id>#<n>`) that should have answered; no NUL.",
        ),
    ] = None

    @field_validator("comment", "right_source")
    @classmethod
    def _text(cls, value: str | None, info: Any) -> str | None:
        return None if value is None else no_nul(value, info.field_name)


class FeedbackIn(RatingIn):
    """Body of `POST /v1/feedback`: the answer (`answer_id`, or an OpenAI completion's `response_id`) and its
    rating."""

    answer_id: str | None = Field(default=None, description="`answer_id` of a `/v1/ask` answer.", max_length=100)
    response_id: str | None = Field(
        default=None, description="`id` of a chat completion (`chatcmpl-...`).", max_length=100
    )

    @model_validator(mode="after")
    def _one_id(self) -> FeedbackIn:
        given = [v for v in (self.answer_id, self.response_id) if v is not None]
        if len(given) != 1:
            raise ValueError("expected exactly one of answer_id and response_id")
        answer_id_of(given[0], "answer_id" if self.answer_id is not None else "response_id")
        return self

    @property
    def target(self) -> str:
        """The answer id given."""
        return self.answer_id or self.response_id or ""


class FeedbackOut(BaseModel):
    """A rating and the answer it rates."""

    answer_id: str
    rating: Rating
    comment: str | None = Field(description="As written (plain text; show it escaped).")
    right_source: str | None
    rated_at: datetime
    answered_at: datetime | None
    question: str
    answer: str
    searches: list[str] = Field(description="Retrieval queries searched for the answer.")
    retrieved: list[dict[str, Any]] = Field(description="Passages retrieved: chunk_id, doc_id, score, passage, title.")
    cited: list[dict[str, Any]] = Field(description="Passages cited: chunk_id, doc_id, score, passage, title.")
    support: dict[str, Any] | None = Field(description="The per-sentence support labels (`SupportReport`).")
    refused: bool
    cached: bool
    collections: list[str]
    filter: dict[str, Any]
    corpus_version: dict[str, int] | None
    llm_model: str
    policy: str

    @classmethod
    def of(cls, rated: Rated) -> FeedbackOut:
        """The JSON form of `rated` (never the key that asked)."""
        r = rated.record
        return cls(
            answer_id=rated.answer_id,
            rating=rated.rating,
            comment=rated.comment,
            right_source=rated.right_source,
            rated_at=rated.rated_at,
            answered_at=r.created_at,
            question=r.question,
            answer=r.answer,
            searches=r.searches,
            retrieved=r.retrieved,
            cited=r.cited,
            support=r.support,
            refused=r.refused,
            cached=r.cached,
            collections=r.collections,
            filter=r.filter,
            corpus_version=r.corpus_version,
            llm_model=r.llm_model,
            policy=r.policy,
        )


class FeedbackList(BaseModel):
    """Ratings, most recent first."""

    feedback: list[FeedbackOut]


@router.post("/v1/feedback", response_model=FeedbackOut, responses=_NOT_FOUND)
async def rate(body: FeedbackIn, rag: Rag, caller: Caller) -> FeedbackOut:
    """Rate one of the caller's answers (module docstring); the stored rating with what it rates."""
    rated = await rag.rate(
        body.target, body.rating, comment=body.comment, right_source=body.right_source, owner=caller.owner
    )
    return FeedbackOut.of(rated)


@router.post("/v1/chat/completions/{completion_id}/feedback", response_model=FeedbackOut, responses=_NOT_FOUND)
async def rate_completion(
    completion_id: Annotated[str, Path(max_length=100, description="The completion's `id`.")],
    body: RatingIn,
    rag: Rag,
    caller: Caller,
) -> FeedbackOut:
    """Rate one of the caller's chat completions by its `id` (as `POST /v1/feedback` with `response_id`)."""
    rated = await rag.rate(
        completion_id, body.rating, comment=body.comment, right_source=body.right_source, owner=caller.owner
    )
    return FeedbackOut.of(rated)


@router.get("/v1/feedback", response_model=FeedbackList)
async def list_feedback(
    rag: Rag,
    caller: Caller,
    rating: Annotated[Rating | None, Query(description="Only `up` or only `down`.")] = None,
    since: Annotated[
        datetime | None, Query(description="Only ratings from this ISO 8601 date or time (UTC when no zone) on.")
    ] = None,
    collection: Annotated[
        list[str] | None, Query(description="Only answers over this collection (repeatable: any of them).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
) -> FeedbackList:
    """The caller's ratings (the admin: everyone's) with what they rate, most recent first."""
    names = None if collection is None else caller.visible(collection)
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    found = await rag.feedback.find(caller.owner, rating, since, names, limit, access=caller.access)
    return FeedbackList(feedback=[FeedbackOut.of(r) for r in found])


@router.get("/v1/feedback/counts")
async def feedback_counts(
    rag: Rag,
    caller: Caller,
    days: Annotated[int, Query(ge=1, le=MAX_DAYS, description="UTC days covered, today included.")] = 7,
) -> dict[str, Any]:
    """Ratings per UTC day over the last `days` days: `{"days", "since", "counts": [{"day", "up", "down", "total"}],
    "totals": {"up", "down", "total"}}` (days without ratings left out; a key holder counts its own answers)."""
    since = datetime.now(UTC).date() - timedelta(days=days - 1)
    counts = await rag.feedback.counts(caller.owner, since)
    up, down = sum(c.up for c in counts), sum(c.down for c in counts)
    return {
        "days": days,
        "since": since.isoformat(),
        "counts": [c.to_json() for c in counts],
        "totals": {"up": up, "down": down, "total": up + down},
    }


@router.get("/v1/feedback/{answer_id}", response_model=FeedbackOut, responses=_NOT_FOUND)
async def get_feedback(
    answer_id: Annotated[str, Path(max_length=100, description="An answer id or a completion id.")],
    rag: Rag,
    caller: Caller,
) -> FeedbackOut:
    """The rating of one of the caller's answers; 404 `answer_not_found` when it is not rated."""
    return FeedbackOut.of(await rag.feedback.rating(answer_id, caller.owner, access=caller.access))


@router.delete("/v1/feedback/{answer_id}", status_code=204, responses=_NOT_FOUND)
async def delete_feedback(
    answer_id: Annotated[str, Path(max_length=100, description="An answer id or a completion id.")],
    rag: Rag,
    caller: Caller,
) -> Response:
    """Forget one of the caller's answers: its record and its rating; 204, or 404 `answer_not_found`."""
    await rag.feedback.delete(answer_id, caller.owner)
    return Response(status_code=204)
