"""What the two cross-encoder clients share (`tools.embedder.reranker.TritonReranker`,
`tools.embedder.verifier.TritonVerifier`): `PairModelClient`, a `TritonModelClient` over a pair tokenizer whose
graph returns `logits` `(batch, width)` for (first, second) text pairs.

Pairs are tokenised `[CLS] first [SEP] second [SEP]` (segment ids 0 then 1), truncated longest-first at the model's
`max_tokens` (`pair_tokenizer`), sorted by length, right-padded to the client's length
buckets (`pad_pairs`), split into requests of at most `max_batch_size` pairs and sent concurrently through the
base client's in-flight slots, retries and request priority.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar, Generic, Protocol, TypeVar, Unpack

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from tools.embedder.client import PRIORITY_INTERACTIVE, ClientOptions, ServedModelSpec, TritonModelClient
from tools.embedder.inputs import check_texts
from tools.errors import EmbedderError

T = TypeVar("T")

PAIR_OUTPUT = "logits"
"""Name of a cross-encoder graph's output: FP32 `(batch, width)` logits."""


def pair_tokenizer(file: Path, max_tokens: int) -> Tokenizer:
    """A tokenizer for (query, passage) pairs from `file` (a `tokenizer.json`): no padding, longest-first truncation
    of the pair at `max_tokens` tokens (special tokens included), as Hugging Face's `truncation=True` does.

    Raises:
        FileNotFoundError: `file` does not exist.
    """
    if not file.is_file():
        raise FileNotFoundError(f"reranker tokenizer {file} not found; expected a Hugging Face tokenizer.json")
    tokenizer = Tokenizer.from_file(str(file))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_tokens, strategy="longest_first")
    return tokenizer


def pad_pairs(encodings: Sequence[Encoding], buckets: Sequence[int]) -> dict[str, npt.NDArray[np.int64]]:
    """Right-pad pair encodings to the smallest bucket that holds the longest.

    Returns:
        `input_ids`, `attention_mask` and `token_type_ids`, each `(len(encodings), bucket)` int64; padding is id 0,
        mask 0, segment 0.

    Raises:
        ValueError: no encodings, or the longest is longer than the largest bucket.
    """
    if not encodings:
        raise ValueError("encodings is empty; expected at least one pair")
    longest = max(len(e.ids) for e in encodings)
    length = next((b for b in buckets if b >= longest), None)
    if length is None:
        raise ValueError(f"a pair has {longest} tokens, more than the largest bucket {buckets[-1]}")
    out = {
        name: np.zeros((len(encodings), length), dtype=np.int64)
        for name in ("input_ids", "attention_mask", "token_type_ids")
    }
    for row, enc in enumerate(encodings):
        n = len(enc.ids)
        out["input_ids"][row, :n] = enc.ids
        out["attention_mask"][row, :n] = 1
        out["token_type_ids"][row, :n] = enc.type_ids
    return out


def spec_named(specs: Mapping[str, T], name: str, kind: str) -> T:
    """`specs[name]`, the description of the `kind` model (e.g. "reranker") called `name`.

    Raises:
        ValueError: unknown name; the message lists the known ones.
    """
    try:
        return specs[name]
    except KeyError:
        raise ValueError(f"unknown {kind} model {name!r}; expected one of {sorted(specs)}") from None


class PairModelSpec(ServedModelSpec, Protocol):
    """What a cross-encoder's description gives: `name`, `max_tokens` and its packaged tokenizer."""

    def tokenizer_file(self) -> Path:
        """The model's `tokenizer.json`."""
        ...


S = TypeVar("S", bound=PairModelSpec)
"""A cross-encoder's description type."""


class PairModelClient(TritonModelClient, Generic[S]):
    """A Triton-served cross-encoder: `pair_logits(pairs)` -> `(len(pairs), width)` float32 logits; a subclass sets
    `width` and the description type `S`.

    Args:
        url: Triton gRPC endpoint(s), as `TritonEmbedder`'s.
        spec: the model's description (a `PairModelSpec`, e.g. `RerankerSpec`, `VerifierSpec`).
        tokenizer_path: its tokenizer.json (or the folder holding it); default: `spec.tokenizer_file()`.
        options: the keyword-only options of `TritonModelClient` (`ClientOptions`); `priority` defaults to
            `PRIORITY_INTERACTIVE` (both cross-encoders are on an answer's path).

    Raises:
        ValueError: as `TritonModelClient`. LookupError / FileNotFoundError: no tokenizer found.
    """

    width: ClassVar[int]
    """Logits per pair the graph returns (`logits` dims `[width]`)."""

    def __init__(
        self,
        url: str,
        spec: S,
        timeout_s: float = 30.0,
        retries: int = 3,
        tokenizer_path: Path | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        if tokenizer_path is None:
            file = spec.tokenizer_file()
        else:
            file = tokenizer_path / "tokenizer.json" if tokenizer_path.is_dir() else tokenizer_path
        options.setdefault("priority", PRIORITY_INTERACTIVE)
        super().__init__(url, spec, pair_tokenizer(file, spec.max_tokens), timeout_s, retries, **options)
        self.spec: S = spec

    def _check_outputs(self, outputs: dict[str, list[int]], endpoint: str) -> None:
        """Raises:
        EmbedderError: the model does not serve `logits` with dims [width].
        """
        if outputs.get(PAIR_OUTPUT) != [self.width]:
            raise EmbedderError(
                f"model {self.model_name!r} on Triton at {endpoint} serves outputs {outputs}; expected "
                f"{PAIR_OUTPUT!r} with dims [{self.width}] (a cross-encoder exported by `python -m "
                "evals.train_reranker` / `python -m evals.train_verifier` or as its config.pbtxt documents)"
            )

    async def pair_logits(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        """The logits of each (first, second) pair, in order.

        Returns:
            `(len(pairs), width)` float32 (`(0, width)` for no pairs).

        Raises:
            EmbedderOverloadedError: Triton or this client refused for lack of capacity.
            EmbedderError: not connected, a blank text, Triton errors after retries, a timeout, a response of
                another shape, or a non-finite logit.
        """
        self._pool.client(0)  # not connected: EmbedderError before any work
        if not pairs:
            return np.zeros((0, self.width), dtype=np.float32)
        check_texts([first for first, _ in pairs])
        check_texts([second for _, second in pairs])
        encodings = self.tokenizer.encode_batch(list(pairs))
        order = sorted(range(len(pairs)), key=lambda i: len(encodings[i].ids))
        groups = [order[i : i + self.max_batch_size] for i in range(0, len(order), self.max_batch_size)]
        results = await asyncio.gather(*(self._group_logits([encodings[i] for i in g]) for g in groups))
        logits = np.empty((len(pairs), self.width), dtype=np.float32)
        for group, rows in zip(groups, results, strict=True):
            logits[group] = rows
        if not np.isfinite(logits).all():
            raise EmbedderError(f"model {self.model_name!r} returned a non-finite logit for {len(pairs)} pairs")
        self.stats.texts += len(pairs)
        return logits

    async def _group_logits(self, encodings: list[Encoding]) -> npt.NDArray[np.float32]:
        padded = pad_pairs(encodings, self.buckets)
        tensors = {
            name: padded[name].astype(np.int32 if kind == "INT32" else np.int64) for name, kind in self.model_inputs
        }
        logits = await self._infer_in_slot(tensors, PAIR_OUTPUT)
        if logits.shape != (len(encodings), self.width):
            raise EmbedderError(
                f"Triton response from {self.model_name!r} has {PAIR_OUTPUT!r} of shape {logits.shape}; expected "
                f"({len(encodings)}, {self.width})"
            )
        rows: npt.NDArray[np.float32] = logits.astype(np.float32)
        return rows
