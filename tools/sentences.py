"""Sentence boundaries of answers and passages: Wikimedia's `sentencex` (a maintained rule-based segmenter for ~300
languages, github.com/wikimedia/sentencex) with the spans of each sentence in the text.

Two repairs on top of its segments, for the text this product splits (LLM answers with citation markers, PDF
passages):

- citation markers at the start of a segment (`[2]` in `... homocysteine. [2] Folic ...`), or a segment that is only
  markers and punctuation, belong to the sentence before it;
- a segment with no letter or digit run of two or more characters (a list number `1.`, a bullet, `e.g.` cut off)
  is joined to the sentence after it (or, at the end, the one before).

Spans are character offsets `[start, end)` into the text, with the sentence's surrounding whitespace outside them,
so `text[start:end]` is the sentence as written.
"""

from __future__ import annotations

import re

import sentencex

SentenceSpan = tuple[int, int]
"""`(start, end)`: a sentence's character offsets in its text, end exclusive."""

_LEADING_MARKERS = re.compile(r"^(?:\[[^\[\]]{1,40}\]\s*[.,;:]?\s*)+")
_WORDISH = re.compile(r"[^\W_]{2,}")


def split_sentences(text: str, language: str = "en") -> list[SentenceSpan]:
    """The sentences of `text`, in order, as `(start, end)` spans (whitespace trimmed off each).

    Args:
        text: any text; blank text has no sentences.
        language: ISO 639 code of the text's language for `sentencex` (its fallback chain covers unknown codes).

    Returns:
        Non-overlapping, increasing spans; every non-space character of `text` lies in one of them.
    """
    raw: list[list[int]] = []
    for boundary in sentencex.get_sentence_boundaries(language, text):
        start, end = int(boundary["start_index"]), int(boundary["end_index"])
        piece = text[start:end]
        lead = len(piece) - len(piece.lstrip())
        trail = len(piece) - len(piece.rstrip())
        if end - trail <= start + lead:
            continue
        raw.append([start + lead, end - trail])
    merged: list[list[int]] = []
    pending: list[int] | None = None  # a fragment waiting for the sentence after it
    for span in raw:
        markers = _LEADING_MARKERS.match(text, span[0], span[1])
        if merged and markers is not None:
            piece = text[span[0] : markers.end()].rstrip()
            merged[-1][1] = span[0] + len(piece)
            span = [markers.end(), span[1]]
            if span[0] >= span[1]:
                continue
        if pending is not None:
            span = [pending[0], span[1]]
            pending = None
        if not _WORDISH.search(text[span[0] : span[1]]):
            pending = span
            continue
        merged.append(span)
    if pending is not None:
        if merged:
            merged[-1][1] = pending[1]
        else:
            merged.append(pending)
    return [(s, e) for s, e in merged]
