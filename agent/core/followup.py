"""The search query of a follow-up question: the question condensed with the conversation's earlier user turns.

A follow-up such as "and what about its side effects?" names nothing to search for; its subject is in the earlier
turns. Two known ways to search for it (LangChain's "condense question" chain, LlamaIndex's
`CondenseQuestionChatEngine`): ask the LLM to rewrite the question as a standalone one, or condense the recent user
turns into the query. This module does the second, deterministically, with no LLM call: the latest question first,
then the earlier user turns, newest first, up to `max_chars`.

Why not the LLM rewrite: it adds a full LLM round trip (seconds on the local model) before retrieval even starts,
and the local SmolLM2-135M does not rewrite reliably (it answers the question instead, or drops the subject). Dense
retrieval takes the concatenation well: the embedder sees the subject words of the earlier turns, and full-text
search matches them; a question that needs no history still leads the query. With a stronger production LLM the
rewrite may win; it fits the same place (`AnswerRequest.retrieval_query`).
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_QUERY_CHARS = 1000
"""Longest condensed query, characters (about 250 tokens: inside the embedder's 256-token window of all-MiniLM-L6-v2
with its query prefix; longer turns are cut, the oldest first)."""

MAX_EARLIER_TURNS = 2
"""Earlier user turns a follow-up's query may carry: the subject of a follow-up is almost always in the last one or
two turns; older ones mostly add noise."""


def condensed_query(
    earlier_questions: Sequence[str],
    question: str,
    max_earlier: int = MAX_EARLIER_TURNS,
    max_chars: int = MAX_QUERY_CHARS,
) -> str:
    """The search query of `question` asked after `earlier_questions` (oldest first): the question, then the last
    `max_earlier` earlier user turns, newest first, joined by newlines, at most `max_chars` characters (the question
    is never cut below itself when it alone is longer: the embedder truncates it as it would a lone question).

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
    used = len(parts[0])
    earlier = [q.strip() for q in earlier_questions if q.strip()]
    for turn in reversed(earlier[len(earlier) - max_earlier :] if max_earlier else []):
        room = max_chars - used - 1
        if room <= 0:
            break
        parts.append(turn[:room])
        used += 1 + len(parts[-1])
    return "\n".join(parts)
