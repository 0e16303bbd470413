"""Citation extraction and validation: only chunks retrieved in this run can be cited.

The model is asked to cite passages as `[n]`. Markers that name no retrieved passage are dropped from the text.
When the answer has no valid marker, a passage counts as cited if the answer reuses a run of at least
`min_shared_words` consecutive words of it (weak models often quote without citing).
"""

from __future__ import annotations

import re

from agent.results import Citation
from tools.retrieval import Passage

_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_WORD = re.compile(r"\w+")


def strip_reasoning(text: str) -> str:
    """Remove `<think>...</think>` blocks (and an unterminated trailing one)."""
    return _THINK.sub("", text).strip()


def visible_text(partial: str) -> str:
    """The part of a partial (streaming) answer that is safe to show: reasoning removed, and a trailing fragment
    that could still become `<think>` held back."""
    text = strip_reasoning(partial)
    cut = text.rfind("<")
    if cut != -1 and "<think>".startswith(text[cut:].lower()):
        text = text[:cut]
    return text


_OPEN_MARKER = re.compile(r"\[[\d,\s]*$")


def stream_text(partial: str, valid_numbers: set[int]) -> str:
    """What a streaming interface may show of a partial answer: `visible_text`, with complete `[n]` markers
    reduced to the passage numbers in `valid_numbers` and a trailing unfinished marker (`[1`, `[1, `) held back.

    Prefix-stable: for a partial answer that only grows, each result extends the previous one (up to held-back
    fragments), so interfaces can append the difference.
    """
    text = visible_text(partial)
    if (open_marker := _OPEN_MARKER.search(text)) is not None:
        text = text[: open_marker.start()]

    def keep_valid(match: re.Match[str]) -> str:
        valid = [n for n in re.split(r"\s*,\s*", match.group(1)) if int(n) in valid_numbers]
        return f"[{', '.join(valid)}]" if valid else ""

    return _MARKER.sub(keep_valid, text)


def _shares_run(answer_words: list[str], passage_words: list[str], n: int) -> bool:
    if len(answer_words) < n:
        return False
    grams = {tuple(passage_words[i : i + n]) for i in range(len(passage_words) - n + 1)}
    return any(tuple(answer_words[i : i + n]) in grams for i in range(len(answer_words) - n + 1))


def extract_citations(answer: str, passages: list[Passage], min_shared_words: int = 5) -> tuple[str, list[Citation]]:
    """Validate `[n]` markers in `answer` against `passages`.

    Returns:
        (answer with invalid markers removed, citations in first-mention order). Every citation names a passage of
        `passages`; none is invented.
    """
    by_number = {p.number: p for p in passages}
    cited: list[int] = []

    def keep_valid(match: re.Match[str]) -> str:
        numbers = [int(n) for n in re.split(r"\s*,\s*", match.group(1))]
        valid = [n for n in numbers if n in by_number]
        for n in valid:
            if n not in cited:
                cited.append(n)
        return f"[{', '.join(str(n) for n in valid)}]" if valid else ""

    cleaned = re.sub(r"[ \t]+([.,;:])", r"\1", _MARKER.sub(keep_valid, answer)).strip()
    if not cited:
        answer_words = [w.lower() for w in _WORD.findall(cleaned)]
        for p in passages:
            if _shares_run(answer_words, [w.lower() for w in _WORD.findall(p.text)], min_shared_words):
                cited.append(p.number)
    citations = [
        Citation(
            doc_id=by_number[n].doc_id,
            chunk_id=by_number[n].chunk_id,
            score=by_number[n].score,
            passage=n,
            title=by_number[n].title,
        )
        for n in cited
    ]
    return cleaned, citations
