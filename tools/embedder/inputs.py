"""Texts to model inputs: tokenisation with truncation at the model limit, right-padding to a few fixed
sequence-length buckets (Triton's dynamic batcher merges only requests of identical shape), and the tensors of every
input the served model declares."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from tools.errors import EmbedderError
from tools.model_specs import EmbeddingModelSpec
from tools.records import TextKind

log = logging.getLogger(__name__)

InputSpec = tuple[str, str]
"""One declared model input: `(name, datatype)` as Triton's model metadata gives them, e.g. `("input_ids", "INT64")`."""

SUPPORTED_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
"""Inputs of a BERT-style encoder the client can fill: the token ids, the mask (1 for tokens, 0 for padding) and
the segment ids (all 0: every text is one segment, as sentence-transformers encodes a single sentence)."""
_DTYPES = {"INT64": np.int64, "INT32": np.int32}


def length_buckets(max_tokens: int) -> list[int]:
    """Padded sequence lengths: 32, 64, 128, then every 64 tokens up to and including `max_tokens`.

    Few, fixed shapes let Triton's dynamic batcher merge concurrent requests (it merges only identical shapes and
    closes a batch at the first request of another shape). `rag bench embedder` on SciFact claims (~23 tokens):
    buckets 16/32/64 split them three ways (mean server batch ~2.0 at concurrency 32), 32/64/128 gave ~3.6 and
    40-130% more req/s; on a compute-bound CPU the extra padding costs less than the lost batching. Steps of 64
    above 128 keep padding waste for document chunks at most a third.
    """
    buckets = [b for b in (32, 64, 128) if b < max_tokens]
    buckets += list(range(192, max_tokens, 64))
    return [*buckets, max_tokens]


def pad_to_bucket(
    token_ids: Sequence[Sequence[int]], buckets: Sequence[int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Right-pad token id lists to the smallest bucket that holds the longest: the model's two inputs.

    Args:
        token_ids: one non-empty list of token ids per text, none longer than `buckets[-1]`.
        buckets: padded lengths, ascending (`length_buckets`).

    Returns:
        `input_ids` and `attention_mask`, both `(len(token_ids), bucket)` int64; padding is id 0 with mask 0.

    Raises:
        ValueError: no texts, or the longest is longer than the largest bucket.
    """
    if not token_ids:
        raise ValueError("token_ids is empty; expected at least one text")
    longest = max(len(ids) for ids in token_ids)
    length = next((b for b in buckets if b >= longest), None)
    if length is None:
        raise ValueError(f"a text has {longest} tokens, more than the largest bucket {buckets[-1]}")
    input_ids = np.zeros((len(token_ids), length), dtype=np.int64)
    mask = np.zeros((len(token_ids), length), dtype=np.int64)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1
    return input_ids, mask


def check_texts(texts: Sequence[object]) -> None:
    """Refuse what no model can embed, before anything is sent.

    Raises:
        EmbedderError: a text is not a string, or is empty or whitespace only (names its index).
    """
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise EmbedderError(f"texts[{i}] is a {type(text).__name__}; expected str")
        if not text.strip():
            raise EmbedderError(f"texts[{i}] is empty or whitespace only; expected non-blank text")


def tokenize(
    tokenizer: Tokenizer, spec: EmbeddingModelSpec, texts: Sequence[str], kind: TextKind
) -> tuple[list[list[int]], int]:
    """Token ids per text (the model's query prefix added for queries), truncated at `spec.max_tokens`.

    Truncation keeps the first `max_tokens - 1` tokens and the final special token ([SEP]); each truncated text is
    logged at WARNING.

    Returns:
        the token ids per text, and how many texts were truncated.

    Raises:
        EmbedderError: a text is not a string, or is blank (`check_texts`).
    """
    check_texts(texts)
    prefix = spec.query_prefix if kind == "query" else ""
    encodings = tokenizer.encode_batch([prefix + t for t in texts])
    ids: list[list[int]] = []
    truncated = 0
    for i, enc in enumerate(encodings):
        tokens = list(enc.ids)
        if len(tokens) > spec.max_tokens:
            truncated += 1
            log.warning(
                "texts[%d] (%r...): %d tokens truncated to the model limit %d",
                i,
                texts[i][:40],
                len(tokens),
                spec.max_tokens,
            )
            tokens = tokens[: spec.max_tokens - 1] + tokens[-1:]
        ids.append(tokens)
    return ids, truncated


def check_model_inputs(declared: Sequence[InputSpec], model: str, where: str) -> list[InputSpec]:
    """The inputs of `model` (Triton's model metadata) the client will send, checked once at connect.

    Args:
        declared: `(name, datatype)` of every input the model declares.
        model, where: the model's name and its server, for the message.

    Returns:
        `declared`, in order: every one of them is sent with each request.

    Raises:
        EmbedderError: an input the client cannot fill (not in `SUPPORTED_INPUTS`, or not INT64/INT32), or no
            `input_ids` (names the input and what was expected).
    """
    for name, datatype in declared:
        if name not in SUPPORTED_INPUTS:
            raise EmbedderError(
                f"model {model!r} at {where} declares input {name!r}, which this client cannot fill; expected only "
                f"{', '.join(SUPPORTED_INPUTS)} (re-export the model with those inputs)"
            )
        if datatype not in _DTYPES:
            raise EmbedderError(
                f"model {model!r} at {where} declares input {name!r} as {datatype}; expected INT64 or INT32"
            )
    if "input_ids" not in {name for name, _ in declared}:
        raise EmbedderError(f"model {model!r} at {where} declares no 'input_ids' input (it declares {declared})")
    return list(declared)


def input_tensors(
    declared: Sequence[InputSpec], input_ids: npt.NDArray[np.int64], attention_mask: npt.NDArray[np.int64]
) -> dict[str, npt.NDArray[np.integer[Any]]]:
    """One tensor per declared input, `(batch, seq)` each in its declared datatype: the token ids, the mask, and
    zeros for `token_type_ids` (same shape as `input_ids`).

    Args:
        declared: the model's inputs, as `check_model_inputs` returned them.
        input_ids, attention_mask: `(batch, seq)` int64 from `pad_to_bucket`.
    """
    source = {"input_ids": input_ids, "attention_mask": attention_mask}
    return {
        name: (source[name] if name in source else np.zeros_like(input_ids)).astype(_DTYPES[datatype], copy=False)
        for name, datatype in declared
    }
