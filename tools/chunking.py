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

import math
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
    _check(chunk_tokens, overlap_tokens)
    if model_max_tokens < 3:
        raise ValueError(f"model_max_tokens={model_max_tokens}; expected >= 3 ([CLS] and [SEP] plus a token)")
    window = min(chunk_tokens, model_max_tokens - 2)
    return window, overlap_tokens * window // chunk_tokens


def max_chunks(n_tokens: int, chunk_tokens: int, overlap_tokens: int) -> int:
    """Most chunks `chunk_text` makes of a text of `n_tokens` tokens: max(1, ceil((n - overlap) / step))."""
    return max(1, math.ceil((n_tokens - overlap_tokens) / (chunk_tokens - overlap_tokens)))


def _check(chunk_tokens: int, overlap_tokens: int) -> None:
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
    _check(chunk_tokens, overlap_tokens)
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
