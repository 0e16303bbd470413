"""Token-aware chunking: windows of N embedder tokens with overlap, cut at token offsets of the original text."""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer


@dataclass(frozen=True)
class Chunk:
    """A span of a document: `text` is `source[start:end]` (character offsets), `token_count` tokens long."""

    index: int
    text: str
    token_count: int
    start: int
    end: int


def chunk_text(text: str, tokenizer: Tokenizer, chunk_tokens: int, overlap_tokens: int) -> list[Chunk]:
    """Split `text` into chunks of at most `chunk_tokens` tokens, consecutive chunks sharing `overlap_tokens`.

    Token counts exclude special tokens ([CLS]/[SEP]); keep `chunk_tokens` at most the model limit minus 2.

    Raises:
        ValueError: `chunk_tokens` < 1, or overlap not in [0, chunk_tokens).
    """
    if chunk_tokens < 1 or not 0 <= overlap_tokens < chunk_tokens:
        raise ValueError(
            f"chunk_tokens={chunk_tokens}, overlap_tokens={overlap_tokens}: expected chunk_tokens >= 1 and "
            f"0 <= overlap_tokens < chunk_tokens"
        )
    if not text.strip():
        return []
    offsets = tokenizer.encode(text, add_special_tokens=False).offsets
    if not offsets:
        return []
    chunks: list[Chunk] = []
    step = chunk_tokens - overlap_tokens
    start_tok = 0
    while True:
        end_tok = min(start_tok + chunk_tokens, len(offsets))
        start_char, end_char = offsets[start_tok][0], offsets[end_tok - 1][1]
        chunks.append(Chunk(len(chunks), text[start_char:end_char], end_tok - start_tok, start_char, end_char))
        if end_tok == len(offsets):
            return chunks
        start_tok += step
