"""The search query of a follow-up question: the question condensed with the conversation's earlier user turns, or
(`FOLLOWUP_QUERY=rewrite`) the LLM's rewrite of it as a standalone query.

A follow-up such as "and what about its side effects?" names nothing to search for; its subject is in the earlier
turns. Two known ways to search for it (LangChain's "condense question" chain, LlamaIndex's
`CondenseQuestionChatEngine`): ask the LLM to rewrite the question as a standalone one, or condense the recent user
turns into the query. `search_query` is the one entry point and does either:

- `condense` (`condensed_query`, the default): the latest question first, then the earlier user turns, newest first,
  up to `max_chars`; deterministic, no LLM call. Dense retrieval takes the concatenation well: the embedder sees the
  subject words of the earlier turns, and full-text search matches them; a question that needs no history still
  leads the query.
- `rewrite` (`LLMRewriter`): a short prompt (the last `MAX_EARLIER_TURNS` earlier user turns and the question) asks
  the same OpenAI-compatible LLM as the agent for one standalone query, within `FOLLOWUP_REWRITE_MAX_TOKENS` tokens
  and `FOLLOWUP_REWRITE_TIMEOUT_S` seconds. A timeout, an error or an unusable reply (`usable_rewrite`: empty, too
  long, or sharing no word with the earlier turns, i.e. the subject was dropped) falls back to the condensed query.

Either way only the search uses it: the agent still answers the question as asked. The first question of a
conversation (no earlier turns) is searched as it is and never costs an LLM call. `rag eval followups` measures both
on SciFact; with SmolLM2-135M the rewrite adds a round trip and often answers the question instead of rewriting it
(docs/evaluations.md, "Follow-up queries").
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic_ai.direct import model_request
from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from tools.language import cjk_chars, content_tokens, detect

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 1000
"""Longest condensed query, characters (about 250 tokens: inside the embedder's 256-token window of all-MiniLM-L6-v2
with its query prefix; longer turns are cut, the oldest first). A Han, kana or Hangul character counts as
`CJK_CHAR_COST` characters: it is about one token, where four or five Latin-script characters are."""

CJK_CHAR_COST = 4
"""What one Han, kana or Hangul character counts for against `MAX_QUERY_CHARS` (about one token, like four Latin
characters), so that a Chinese or Japanese history is cut to the same share of the embedder's window as an English
one and the question keeps its weight."""

MAX_EARLIER_TURNS = 2
"""Earlier user turns a follow-up's query may carry: the subject of a follow-up is almost always in the last one or
two turns; older ones mostly add noise."""

MAX_REWRITE_CHARS = 300
"""Longest usable rewrite, characters: a longer reply is an answer or an explanation, not a search query."""

REWRITE_INSTRUCTIONS = (
    "You rewrite a follow-up question as one standalone search query. Replace pronouns such as it, this, they and "
    "omitted words with what they refer to in the earlier questions. Do not answer the question. Reply with the "
    "query only, on one line."
)
"""The system prompt of the rewrite."""

Method = Literal["question", "condensed", "rewritten"]
"""How a search query was made: the question as is (no earlier turns), condensed, or rewritten by the LLM."""

Fallback = Literal["timeout", "error", "unusable"]
"""Why a rewrite was not used: it took longer than its timeout, the LLM call failed, or its reply was unusable."""


@dataclass(frozen=True)
class RewriteReply:
    """The LLM's reply to one rewrite request.

    Attributes:
        text: the raw reply (may be empty); `usable_rewrite` checks it.
        input_tokens: prompt tokens the LLM server reported for the request (0 when it reported none).
        output_tokens: generated tokens the LLM server reported, tokens.
    """

    text: str
    input_tokens: int = 0
    output_tokens: int = 0


class QueryRewriter(Protocol):
    """Rewrites a follow-up as a standalone search query (`LLMRewriter`; tests pass their own)."""

    timeout_s: float
    """Longest wait for `rewrite`, seconds; `search_query` enforces it."""

    async def rewrite(self, earlier_questions: Sequence[str], question: str) -> RewriteReply:
        """The raw reply for `question` asked after `earlier_questions` (oldest first); checked by the caller."""
        ...


@dataclass(frozen=True)
class FollowUpQuery:
    """The search query of one question and how it was made.

    Attributes:
        query: what to search with.
        method: `question` (no earlier turns), `condensed` or `rewritten`.
        fallback: why the rewrite asked for was not used (the query is then the condensed one); None otherwise.
        rewrite_ms: time spent on the rewrite, ms; 0.0 when none was asked for.
        input_tokens: prompt tokens the rewrite's LLM request used (0 without a reply: none asked for, a timeout
            or an error); counted in the answer's usage, so quotas and `usage` see them.
        output_tokens: generated tokens of the rewrite, counted likewise.
    """

    query: str
    method: Method
    fallback: Fallback | None = None
    rewrite_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0


def condensed_query(
    earlier_questions: Sequence[str],
    question: str,
    max_earlier: int = MAX_EARLIER_TURNS,
    max_chars: int = MAX_QUERY_CHARS,
) -> str:
    """The search query of `question` asked after `earlier_questions` (oldest first): the question, then the last
    `max_earlier` earlier user turns, newest first, joined by newlines, at most `max_chars` characters (CJK ones
    counting `CJK_CHAR_COST`; the question is never cut below itself when it alone is longer: the embedder truncates
    it as it would a lone question).

    Returns:
        `question` unchanged when there are no earlier turns.

    Raises:
        ValueError: blank question, max_earlier < 0 or max_chars < 1.
    """
    if not question.strip():
        raise ValueError("question is empty; expected a non-blank question")
    if max_earlier < 0 or max_chars < 1:
        raise ValueError(f"max_earlier={max_earlier}, max_chars={max_chars}; expected >= 0 and >= 1")
    parts = [question.strip()]
    used = _cost(parts[0])
    earlier = [q.strip() for q in earlier_questions if q.strip()]
    for turn in reversed(earlier[len(earlier) - max_earlier :] if max_earlier else []):
        kept = _fit(turn, max_chars - used - 1)
        if not kept:
            break
        parts.append(kept)
        used += 1 + _cost(kept)
    return "\n".join(parts)


def _cost(text: str) -> int:
    """`text`'s length against `MAX_QUERY_CHARS`: characters, a CJK character counting `CJK_CHAR_COST`."""
    return len(text) + (CJK_CHAR_COST - 1) * cjk_chars(text)


def _fit(text: str, room: int) -> str:
    """The longest start of `text` whose `_cost` is at most `room` (empty when none)."""
    if room <= 0:
        return ""
    if _cost(text) <= room:
        return text
    low, high = 0, min(len(text), room)
    while low < high:  # the longest prefix within room (cost grows with the prefix)
        middle = (low + high + 1) // 2
        low, high = (middle, high) if _cost(text[:middle]) <= room else (low, middle - 1)
    return text[:low]


def rewrite_prompt(earlier_questions: Sequence[str], question: str) -> str:
    """The user message of the rewrite: the earlier questions (oldest first), one per line, then the follow-up."""
    lines = "\n".join(f"- {q.strip()}" for q in earlier_questions if q.strip())
    return f"Earlier questions:\n{lines}\nFollow-up question: {question.strip()}\nStandalone search query:"


_STOPWORDS = frozenset(
    (
        "the",
        "and",
        "for",
        "are",
        "was",
        "were",
        "with",
        "that",
        "this",
        "these",
        "those",
        "they",
        "them",
        "their",
        "its",
        "has",
        "have",
        "had",
        "not",
        "but",
        "what",
        "which",
        "who",
        "how",
        "does",
        "did",
        "can",
        "could",
        "would",
        "should",
        "about",
        "from",
        "into",
        "than",
        "then",
        "there",
        "here",
        "when",
        "where",
        "why",
        "you",
        "your",
        "our",
        "any",
        "all",
    )
)
_LABEL = re.compile(r"^(?:standalone\s+)?(?:search\s+)?(?:query|question|rewrite|rewritten\s+query)\s*:\s*", re.I)


def _words(text: str) -> set[str]:
    """Content tokens of `text` in any script (`tools.language.content_tokens`), common English words aside."""
    return content_tokens(text) - _STOPWORDS


def usable_rewrite(
    reply: str, earlier_questions: Sequence[str], question: str, max_chars: int = MAX_REWRITE_CHARS
) -> str | None:
    """The search query in an LLM's rewrite `reply`, or None when it is unusable.

    The first non-blank line is kept, without a leading label (`Query:`, `Standalone search query:`) or surrounding
    quotes. It is unusable when it is empty, longer than `max_chars`, a preamble ending in a colon, an echo quoting
    an earlier question whole (`The answer to the question "..." is:`, which small models write), in another
    language than the conversation (`tools.language.detect` of the question, else of the earlier turns, and of the
    rewrite both tell, and differ: an English rewrite of a German conversation searches for English passages), or
    shares no content token (a word of three letters or more, common English words aside, or a CJK character bigram:
    `tools.language.content_tokens`) with `earlier_questions`: then it lost the subject the follow-up refers to, and
    the condensed query, which carries it, is better.
    """
    line = next((ln.strip() for ln in reply.splitlines() if ln.strip()), "")
    line = _LABEL.sub("", line).strip().strip("\"'`").strip()
    if not line or len(line) > max_chars or line.endswith(":"):
        return None
    if any(q.strip().lower() in line.lower() for q in earlier_questions if q.strip()):
        return None
    conversation = detect(question) or detect(" ".join(earlier_questions))
    written = detect(line)
    if conversation is not None and written is not None and written != conversation:
        return None
    earlier = set().union(*(_words(q) for q in earlier_questions)) if earlier_questions else set()
    return line if _words(line) & earlier else None


class LLMRewriter:
    """The rewrite by an OpenAI-compatible LLM through pydantic-ai (`pydantic_ai.direct.model_request`, one
    non-streamed request): `REWRITE_INSTRUCTIONS` and `rewrite_prompt`, temperature 0, at most `max_tokens` tokens,
    no retries (a failure falls back at once).

    Args:
        model: the agent's model (`agent.core.llm.build_model`).
        max_tokens: output budget, tokens (`FOLLOWUP_REWRITE_MAX_TOKENS`).
        timeout_s: longest wait, seconds (`FOLLOWUP_REWRITE_TIMEOUT_S`); also the HTTP request's timeout.
        extra: further request settings (e.g. the `max_tokens` field choice is the model's profile's).
    """

    def __init__(self, model: Model, max_tokens: int, timeout_s: float, extra: ModelSettings | None = None) -> None:
        if max_tokens < 1 or timeout_s <= 0:
            raise ValueError(f"max_tokens={max_tokens}, timeout_s={timeout_s}; expected >= 1 and > 0")
        self.model = model
        self.timeout_s = timeout_s
        self.settings = ModelSettings(**(extra or {}))
        self.settings.update(ModelSettings(max_tokens=max_tokens, temperature=0.0, timeout=timeout_s, max_retries=0))

    async def rewrite(self, earlier_questions: Sequence[str], question: str) -> RewriteReply:
        """The LLM's reply text (may be empty) and the tokens the server reported for it.

        Raises:
            pydantic_ai.exceptions.ModelAPIError / UnexpectedModelBehavior: the request failed.
        """
        request = ModelRequest(
            parts=[SystemPromptPart(REWRITE_INSTRUCTIONS), UserPromptPart(rewrite_prompt(earlier_questions, question))]
        )
        response = await model_request(self.model, [request], model_settings=self.settings)
        return RewriteReply(response.text or "", response.usage.input_tokens, response.usage.output_tokens)


async def search_query(
    earlier_questions: Sequence[str],
    question: str,
    rewriter: QueryRewriter | None = None,
    max_earlier: int = MAX_EARLIER_TURNS,
) -> FollowUpQuery:
    """The search query of `question` asked after `earlier_questions` (oldest first): the question itself when there
    are none (no LLM call), else `rewriter`'s usable rewrite within its `timeout_s` when a rewriter is given, else (or
    when the rewrite times out, fails or is unusable) `condensed_query`. Only the last `max_earlier` earlier turns
    are used.

    Raises:
        ValueError: blank question or max_earlier < 0. A failing rewriter never raises (it falls back, logged);
            cancellation propagates.
    """
    if not question.strip():
        raise ValueError("question is empty; expected a non-blank question")
    if max_earlier < 0:
        raise ValueError(f"max_earlier={max_earlier}; expected >= 0")
    earlier = [q for q in earlier_questions if q.strip()]
    earlier = earlier[len(earlier) - max_earlier :] if max_earlier else []
    if not earlier:
        return FollowUpQuery(question, "question")
    condensed = condensed_query(earlier, question, max_earlier)
    if rewriter is None:
        return FollowUpQuery(condensed, "condensed")
    start = time.perf_counter()
    fallback: Fallback
    try:
        async with asyncio.timeout(rewriter.timeout_s):
            reply = await rewriter.rewrite(earlier, question)
    except TimeoutError:
        fallback = "timeout"
    except Exception as exc:  # noqa: BLE001 - any failure of the rewrite falls back to the condensed query
        log.warning("follow-up rewrite failed, searching the condensed query: %r", exc)
        fallback = "error"
    else:
        elapsed_ms = (time.perf_counter() - start) * 1000
        usable = usable_rewrite(reply.text, earlier, question)
        tokens = (reply.input_tokens, reply.output_tokens)
        if usable is not None:
            return FollowUpQuery(usable, "rewritten", None, elapsed_ms, *tokens)
        return FollowUpQuery(condensed, "condensed", "unusable", elapsed_ms, *tokens)
    return FollowUpQuery(condensed, "condensed", fallback, (time.perf_counter() - start) * 1000)
