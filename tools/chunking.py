"""Token-aware chunking: windows of N embedder tokens with overlap, cut at sentence ends where one is near, at token
offsets of the original text.

Each chunk starts where the previous one started plus `step = chunk_tokens - overlap_tokens` tokens (or later, at a
word or sentence start inside the previous chunk), so a document of n tokens gives at most
max(1, ceil((n - overlap) / step)) chunks (`max_chunks`). The one exception: a cut that must fall inside a word
longer than the overlap (e.g. overlap 0) can re-tokenise to more tokens than the window and is then shortened, one
extra chunk at most per such cut. A chunk ends at the last sentence end (`.!?` and the CJK `。！？`, with
closing quotes or brackets) inside its last `overlap_tokens` tokens, else at the last word boundary there, else at the
full window; cutting inside the overlap keeps the next chunk's start inside this one, so no text is lost. Every chunk
is re-tokenised: its `token_count` is the count of its own text and never exceeds the window.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from tokenizers import Tokenizer

SENTENCE_END = frozenset(".!?。！？．｡!?")
"""Characters that end a sentence (ASCII, CJK full-width and half-width forms)."""
_CLOSERS = frozenset("\"')]}»”’」』）】〉》")


@dataclass(frozen=True)
class Chunk:
    """A span of a document: `text` is `source[start:end]` (character offsets), `token_count` tokens long
    (the embedder's tokens of `text` alone, special tokens excluded)."""

    index: int
    text: str
    token_count: int
    start: int
    end: int


def fit_window(chunk_tokens: int, overlap_tokens: int, model_max_tokens: int) -> tuple[int, int]:
    """The (window, overlap) in tokens to chunk with for a model that takes `model_max_tokens` tokens, [CLS] and
    [SEP] included: the window is clamped to `model_max_tokens - 2` and the overlap shrinks with it in proportion
    (overlap * window // chunk_tokens), so the step stays >= 1 and the chunk count stays near what was asked.

    Raises:
        ValueError: chunk_tokens < 1, overlap not in [0, chunk_tokens), or model_max_tokens < 3.
    """
    check_window(chunk_tokens, overlap_tokens)
    if model_max_tokens < 3:
        raise ValueError(f"model_max_tokens={model_max_tokens}; expected >= 3 ([CLS] and [SEP] plus a token)")
    window = min(chunk_tokens, model_max_tokens - 2)
    return window, overlap_tokens * window // chunk_tokens


def max_chunks(n_tokens: int, chunk_tokens: int, overlap_tokens: int) -> int:
    """Most chunks `chunk_text` makes of a text of `n_tokens` tokens: max(1, ceil((n - overlap) / step))."""
    return max(1, math.ceil((n_tokens - overlap_tokens) / (chunk_tokens - overlap_tokens)))


def check_window(chunk_tokens: int, overlap_tokens: int) -> None:
    """Raise ValueError naming both unless chunk_tokens >= 1 and 0 <= overlap_tokens < chunk_tokens."""
    if chunk_tokens < 1 or not 0 <= overlap_tokens < chunk_tokens:
        raise ValueError(
            f"chunk_tokens={chunk_tokens}, overlap_tokens={overlap_tokens}: expected chunk_tokens >= 1 and "
            f"0 <= overlap_tokens < chunk_tokens"
        )


def chunk_text(text: str, tokenizer: Tokenizer, chunk_tokens: int, overlap_tokens: int) -> list[Chunk]:
    """Split `text` into chunks of at most `chunk_tokens` tokens, consecutive chunks sharing up to `overlap_tokens`
    (less where a chunk ends at a sentence end inside the overlap).

    Token counts exclude special tokens ([CLS]/[SEP]); keep `chunk_tokens` at most the model limit minus 2
    (`fit_window`).

    Raises:
        ValueError: `chunk_tokens` < 1, or overlap not in [0, chunk_tokens).
    """
    check_window(chunk_tokens, overlap_tokens)
    if not text.strip():
        return []
    encoding = tokenizer.encode(text, add_special_tokens=False)
    offsets, words = encoding.offsets, encoding.word_ids
    n = len(offsets)
    if n == 0:
        return []

    def word_boundary(i: int) -> bool:  # a cut before token i splits no word
        return i in (0, n) or words[i] is None or words[i] != words[i - 1]

    def sentence_end(i: int) -> bool:  # a cut before token i follows a sentence end
        if not word_boundary(i) or i == 0:
            return False
        j = i - 1
        while j > 0 and text[offsets[j][0] : offsets[j][1]] in _CLOSERS:
            j -= 1
        piece = text[offsets[j][0] : offsets[j][1]]
        return bool(piece) and piece[-1] in SENTENCE_END

    def token_count(start: int, end: int) -> int:
        return len(tokenizer.encode(text[offsets[start][0] : offsets[end - 1][1]], add_special_tokens=False).ids)

    step = chunk_tokens - overlap_tokens
    chunks: list[Chunk] = []
    start = 0
    while True:
        limit = min(start + chunk_tokens, n)
        end = limit
        if limit < n:
            lowest = start + step  # the next chunk starts here at the earliest; end no earlier, so no gap
            end = next((i for i in range(limit, lowest - 1, -1) if sentence_end(i)), 0) or next(
                (i for i in range(limit, lowest - 1, -1) if word_boundary(i)), limit
            )
        count = token_count(start, end)
        while count > chunk_tokens and end > start + 1:  # re-tokenised text can be longer (cut inside a word)
            end -= max(1, count - chunk_tokens)
            end = max(end, start + 1)
            count = token_count(start, end)
        start_char, end_char = offsets[start][0], offsets[end - 1][1]
        chunks.append(Chunk(len(chunks), text[start_char:end_char], count, start_char, end_char))
        if end == n:
            return chunks
        earliest = min(start + step, end)
        candidates = range(earliest, end)
        start = next((i for i in candidates if sentence_end(i)), 0) or next(
            (i for i in candidates if word_boundary(i)), earliest
        )


PART_MAX_CHARS = 65_536
"""Longest span tokenised at once by `chunk_parts`: a longer part is cut at its last paragraph break, line break or
space before this many characters, so the memory one tokenisation takes is bounded whatever the document's size."""


def _pieces(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """(start, end) spans covering text[start:end], each at most PART_MAX_CHARS long, cut at whitespace."""
    spans: list[tuple[int, int]] = []
    while end - start > PART_MAX_CHARS:
        limit = start + PART_MAX_CHARS
        cut = max(text.rfind("\n\n", start, limit), -1)
        if cut <= start:
            cut = text.rfind("\n", start, limit)
        if cut <= start:
            cut = text.rfind(" ", start, limit)
        if cut <= start:
            cut = limit
        spans.append((start, cut))
        start = cut
    spans.append((start, end))
    return spans


def chunk_parts(
    text: str, starts: list[int], tokenizer: Tokenizer, chunk_tokens: int, overlap_tokens: int
) -> list[tuple[int, Chunk]]:
    """All of `iter_chunk_parts` as a list."""
    return list(iter_chunk_parts(text, starts, tokenizer, chunk_tokens, overlap_tokens))


def iter_chunk_parts(
    text: str, starts: list[int], tokenizer: Tokenizer, chunk_tokens: int, overlap_tokens: int
) -> Iterator[tuple[int, Chunk]]:
    """Chunks of `text` that never cross a part boundary: `starts` are the character offsets where parts (pages,
    heading sections) begin, ascending; text before the first start is a part of its own. Each part is chunked by
    `chunk_text` (a part longer than `PART_MAX_CHARS` in pieces cut at whitespace) and its chunks get offsets into
    `text` and consecutive indices across the document.

    Yields:
        (part number, chunk) pairs in text order; the part number indexes `starts` (-1 for text before the first).
        Lazily: memory holds one piece's tokens and chunks, whatever the text's length.

    Raises:
        ValueError: see `chunk_text`; `starts` not ascending or outside the text.
    """
    if any(b < a for a, b in itertools.pairwise(starts)) or any(not 0 <= s <= len(text) for s in starts):
        raise ValueError(f"part starts {starts[:5]}...: expected ascending offsets within the text")
    bounds = [(-1, 0, starts[0] if starts else len(text))]
    ends = [*starts[1:], len(text)] if starts else []
    bounds += [(i, s, e) for i, (s, e) in enumerate(zip(starts, ends, strict=True))]
    index = 0
    for part, part_start, part_end in bounds:
        for piece_start, piece_end in _pieces(text, part_start, part_end):
            for chunk in chunk_text(text[piece_start:piece_end], tokenizer, chunk_tokens, overlap_tokens):
                yield (
                    part,
                    Chunk(index, chunk.text, chunk.token_count, chunk.start + piece_start, chunk.end + piece_start),
                )
                index += 1
