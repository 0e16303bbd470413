"""Citation extraction and validation: only chunks retrieved in this run can be cited.

The model is asked to cite passages as `[n]`. Models also write `[1, 3]`, `[passage 2]`, `[doc 4983]` and
`(doc 4983)` (the agentic tool results show `(doc <id>)`). A marker naming a retrieved passage or document is kept,
written as `[n]`; any other marker is removed from the text and listed as dropped. The punctuation and spacing the
removal leaves (`fair .`, `,,.`, `( )`) are cleaned.

The streamed text and the final text are the same function of the model output (`render_answer`): the streamed
version only holds back a tail that later tokens could still change (an unfinished marker or reasoning tag, trailing
spaces and punctuation), so the concatenated stream equals the final answer.

When the answer has no valid marker, a passage counts as cited if the answer reuses a run of at least
`min_shared_words` consecutive words of it (weak models often quote without citing).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.core.results import Citation, location_fields
from tools.retrieval import Passage

_NUMBERS = r"\d+(?:\s*[,;]\s*\d+)*"
_DOC_ID = r"[^\s\[\]()<>,;]+"
_MARKER = re.compile(
    rf"\[\s*(?:passages?\s*)?(?P<nums>{_NUMBERS})\s*\]"
    rf"|[\[(]\s*doc(?:ument)?\s*(?:id\s*)?[:#]?\s*(?P<doc>{_DOC_ID})\s*[\])]",
    re.IGNORECASE,
)
CITATION_MARKER = _MARKER
"""A citation marker as models write it: `[n]`, `[n, m]`, `[passage n]`, `[doc <id>]` or `(doc <id>)`."""


def _prefixes(word: str) -> str:
    """A regex matching every prefix of `word`, the empty one included."""
    return "".join(f"(?:{re.escape(c)}" for c in word) + ")?" * len(word)


# A marker still being written at the end of a partial answer: `[`, `[1,`, `[pass`, `(do`, `[doc 42`.
_OPEN_MARKER = re.compile(
    rf"\[\s*(?:passages?\s*)?[\d\s,;]*$"
    rf"|\[\s*{_prefixes('passages')}$"
    rf"|[\[(]\s*{_prefixes('document')}$"
    rf"|[\[(]\s*doc(?:ument)?\s*(?:id\s*)?[:#]?\s*(?:{_DOC_ID})?\s*$",
    re.IGNORECASE,
)
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_TAGS = ("<think>", "</think>")
_WORD = re.compile(r"\w+")
# Clean-up after markers are removed, applied in order.
_CLEANUP: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\(\s*\)"), ""),  # `( )` left by `([9])`
    (re.compile(r"[ \t]+(?=[.,;:!?)])"), ""),  # `fair .` -> `fair.`
    (re.compile(r"([,;:])(?:\s*[,;:])+"), r"\1"),  # `, ,` -> `,`
    (re.compile(r"[,;:]\s*(?=[.!?])"), ""),  # `,.` -> `.`
    (re.compile(r"\(\s+"), "("),
    (re.compile(r"[ \t]{2,}"), " "),
)
# A tail the clean-up could still change when more text arrives: spaces, punctuation, brackets.
_UNSETTLED_TAIL = re.compile(r"[\s.,;:!?()]+$")


def strip_reasoning(text: str) -> str:
    """Remove reasoning: `<think>...</think>` blocks (an unterminated trailing one too), and everything up to a
    `</think>` that has no opening tag before it (chat templates that open `<think>` in the prompt make the model
    write `reasoning...</think>answer`)."""
    return _drop_reasoning(text).strip()


def _drop_reasoning(text: str) -> str:
    close = _THINK_CLOSE.search(text)
    opening = _THINK_OPEN.search(text)
    if close is not None and (opening is None or close.start() < opening.start()):
        text = text[close.end() :]
    return _THINK_BLOCK.sub("", text)


def visible_text(partial: str) -> str:
    """The part of a partial (streaming) answer that is safe to show: reasoning removed, and a trailing fragment
    that could still become `<think>` or `</think>` held back."""
    text = _drop_reasoning(partial).lstrip()
    cut = text.rfind("<")
    if cut != -1 and any(tag.startswith(text[cut:].lower()) for tag in _TAGS):
        text = text[:cut]
    return text


@dataclass(frozen=True)
class RenderedAnswer:
    """An answer as shown: `text` with markers validated, the passage numbers it cites (first-mention order) and
    the markers it dropped as written (e.g. `[7]`, `[doc 99999]`)."""

    text: str
    cited: list[int] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def render_answer(raw: str, passages: Sequence[Passage], *, final: bool = True) -> RenderedAnswer:
    """Render model output `raw` against the passages retrieved in this run.

    Reasoning is removed; `[n]` markers keep the numbers of `passages`; `[doc <id>]` / `(doc <id>)` markers naming a
    retrieved document become `[n]` of that document's first passage; every other marker is removed and listed in
    `dropped`; the spacing and punctuation left behind are cleaned.

    Args:
        final: False for a partial answer while it streams: a tail that later text could still change is held back
            (an unfinished marker or reasoning tag, trailing spaces and punctuation). For an output that only
            grows, each partial rendering is a prefix of the next and of the final one (unless a `</think>`
            without an opening tag arrives: then the reasoning shown so far is withdrawn).
    """
    by_number = {p.number: p for p in passages}
    by_doc: dict[str, int] = {}
    for p in sorted(passages, key=lambda p: p.number):
        by_doc.setdefault(p.doc_id, p.number)
    text = strip_reasoning(raw) if final else visible_text(raw)
    if not final and (open_marker := _OPEN_MARKER.search(text)) is not None:
        text = text[: open_marker.start()]
    cited: list[int] = []
    dropped: list[str] = []

    def validate(match: re.Match[str]) -> str:
        if match.group("nums") is not None:
            numbers = [int(n) for n in re.split(r"\s*[,;]\s*", match.group("nums"))]
            valid = [n for n in dict.fromkeys(numbers) if n in by_number]
            if len(valid) < len(set(numbers)):
                dropped.append(match.group(0))
        else:
            number = by_doc.get(match.group("doc"))
            valid = [] if number is None else [number]
            if number is None:
                dropped.append(match.group(0))
        cited.extend(n for n in valid if n not in cited)
        return f"[{', '.join(str(n) for n in valid)}]" if valid else ""

    text = _MARKER.sub(validate, text)
    for pattern, replacement in _CLEANUP:
        text = pattern.sub(replacement, text)
    if final:
        text = text.strip()
    elif (tail := _UNSETTLED_TAIL.search(text)) is not None:
        text = text[: tail.start()]
    return RenderedAnswer(text, cited, dropped)


def stream_text(partial: str, passages: Sequence[Passage]) -> str:
    """What a streaming interface may show of a partial answer: `render_answer(partial, passages, final=False)`.

    Prefix-stable: for a partial answer that only grows, each result extends the previous one, and the last one is
    a prefix of the final answer, so interfaces can append the difference.
    """
    return render_answer(partial, passages, final=False).text


def _shares_run(answer_words: list[str], passage_words: list[str], n: int) -> bool:
    if len(answer_words) < n:
        return False
    grams = {tuple(passage_words[i : i + n]) for i in range(len(passage_words) - n + 1)}
    return any(tuple(answer_words[i : i + n]) in grams for i in range(len(answer_words) - n + 1))


def extract_citations(
    answer: str, passages: Sequence[Passage], min_shared_words: int = 5
) -> tuple[str, list[Citation], list[str]]:
    """Validate the citation markers of a complete model output against `passages` (see `render_answer`).

    Returns:
        (answer text as shown, citations in first-mention order, dropped markers as written). Every citation names
        a passage of `passages`; none is invented.
    """
    rendered = render_answer(answer, passages, final=True)
    cited = list(rendered.cited)
    if not cited:
        answer_words = [w.lower() for w in _WORD.findall(rendered.text)]
        for p in sorted(passages, key=lambda p: p.number):
            if _shares_run(answer_words, [w.lower() for w in _WORD.findall(p.text)], min_shared_words):
                cited.append(p.number)
    return rendered.text, citations_of(cited, passages), rendered.dropped


def citations_of(numbers: Sequence[int], passages: Sequence[Passage]) -> list[Citation]:
    """The `Citation` of each passage number in `numbers` (in that order) that names one of `passages`."""
    by_number = {p.number: p for p in passages}
    return [
        Citation(
            doc_id=by_number[n].doc_id,
            chunk_id=by_number[n].chunk_id,
            score=by_number[n].score,
            passage=n,
            title=by_number[n].title,
            text=by_number[n].text,
            **location_fields(by_number[n].metadata),
        )
        for n in numbers
        if n in by_number
    ]
