"""The rerank client: `TritonReranker`, a cross-encoder served by Triton, over the embedder's client machinery.

A cross-encoder reads a question and a passage together and returns one relevance logit for the pair (Nogueira and
Cho, "Passage Re-ranking with BERT", 2019). Pairs are tokenised as the model was trained: `[CLS] query [SEP] passage
[SEP]` with segment ids 0 then 1 (BERT's pair template from the model's `tokenizer.json`), truncated longest-first to
the model's `max_tokens`, right-padded to the same length buckets as the embedder's texts
(`tools.embedder.inputs.length_buckets`), split into requests of at most the model's `max_batch_size` and sent
concurrently through `TritonModelClient` (in-flight slots, retries, stub-failure handling, request priority).

Graph contract (`evals/train_reranker.py` exports it, `config.pbtxt` declares it): inputs `input_ids`,
`attention_mask` and optionally `token_type_ids`, INT64 `(batch, seq)`; output `logits`, FP32 `(batch, 1)`, higher
is more relevant (the same contract as `BAAI/bge-reranker-v2-m3` exported by Hugging Face Optimum, which takes no
`token_type_ids`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from tools.embedder.client import PRIORITY_INTERACTIVE, ClientOptions, TritonModelClient
from tools.embedder.errors import EmbedderError
from tools.embedder.inputs import check_texts
from tools.model_specs import get_spec

RERANK_OUTPUT = "logits"
"""Name of the reranker graph's output: one relevance logit per pair, FP32 `(batch, 1)`."""


@dataclass(frozen=True)
class RerankerSpec:
    """Facts about one ONNX cross-encoder served by Triton.

    Attributes:
        name: Triton model name (directory under `model_repository/`).
        source: where the weights come from (a Hugging Face id, or how they are made here).
        max_tokens: longest pair in tokens, special tokens included.
        tokenizer_model: the embedding model (`tools.model_specs`) whose packaged tokenizer the cross-encoder uses,
            or None when its tokenizer ships in no package (give `tokenizer_path`).
    """

    name: str
    source: str
    max_tokens: int
    tokenizer_model: str | None = None

    def tokenizer_file(self) -> Path:
        """The packaged `tokenizer.json` of the model.

        Raises:
            LookupError: the tokenizer ships in no installed package (pass `tokenizer_path` instead).
        """
        if self.tokenizer_model is None:
            raise LookupError(f"reranker {self.name!r} ({self.source}) ships no tokenizer: give its tokenizer.json")
        return get_spec(self.tokenizer_model).tokenizer_file()


LOCAL_RERANKER = "minilm-l6-scifact-reranker"
"""The cross-encoder of the local stack: all-MiniLM-L6-v2's encoder with a one-logit head, trained on SciFact's train
split by `python -m evals.train_reranker` (in-domain: trained on SciFact train)."""

RERANKER_SPECS: dict[str, RerankerSpec] = {
    spec.name: spec
    for spec in (
        RerankerSpec(
            name=LOCAL_RERANKER,
            source="sentence-transformers/all-MiniLM-L6-v2 + 1-logit head, trained on SciFact train "
            "(evals/train_reranker.py)",
            max_tokens=256,
            tokenizer_model="all-minilm-l6-v2",
        ),
        RerankerSpec(name="bge-reranker-v2-m3", source="BAAI/bge-reranker-v2-m3", max_tokens=512),
    )
}


def get_reranker_spec(name: str) -> RerankerSpec:
    """The description of reranker `name`.

    Raises:
        ValueError: unknown reranker; the message lists the known ones.
    """
    try:
        return RERANKER_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown reranker model {name!r}; expected one of {sorted(RERANKER_SPECS)}") from None


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


class TritonReranker(TritonModelClient):
    """Async client for one Triton-served cross-encoder: `score(query, passages)` -> one logit per passage.

    Args:
        url: Triton gRPC endpoint(s), as `TritonEmbedder`'s.
        spec: the reranker's description (`RERANKER_SPECS`).
        tokenizer_path: its tokenizer.json (or the folder holding it); default: the packaged one
            (`RerankerSpec.tokenizer_file`).
        options: the keyword-only options of `TritonModelClient` (`ClientOptions`); `priority` defaults to
            `PRIORITY_INTERACTIVE` (reranking is on a question's path).

    Raises:
        ValueError: as `TritonModelClient`. LookupError / FileNotFoundError: no tokenizer found.

    Use as `async with TritonReranker(...) as reranker: scores = await reranker.score(query, passages)`; keep one per
    process.
    """

    def __init__(
        self,
        url: str,
        spec: RerankerSpec,
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
        self.spec: RerankerSpec = spec

    def _check_outputs(self, outputs: dict[str, list[int]], endpoint: str) -> None:
        """Raises:
        EmbedderError: the model does not serve `logits` with dims [1] (one logit per pair).
        """
        if outputs.get(RERANK_OUTPUT) != [1]:
            raise EmbedderError(
                f"model {self.model_name!r} on Triton at {endpoint} serves outputs {outputs}; expected "
                f"{RERANK_OUTPUT!r} with dims [1] (a cross-encoder exported by `python -m evals.train_reranker` or "
                "as its config.pbtxt documents)"
            )

    async def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]:
        """Relevance logits of (`query`, passage) for each passage, in order.

        Pairs are sorted by length and sent in requests of at most `max_batch_size` pairs, concurrently up to
        `max_in_flight`; each pair is truncated longest-first at the model's `max_tokens`.

        Returns:
            `(len(passages),)` float32 logits, higher is more relevant (an empty array for no passages).

        Raises:
            EmbedderOverloadedError: Triton or this client refused for lack of capacity.
            EmbedderError: not connected, a blank query or passage, Triton errors after retries, a timeout, a
                response of another shape, or a non-finite logit.
        """
        self._pool.client(0)  # not connected: EmbedderError before any work
        if not passages:
            return np.zeros((0,), dtype=np.float32)
        check_texts([query])
        check_texts(passages)
        encodings = self.tokenizer.encode_batch([(query, p) for p in passages])
        order = sorted(range(len(passages)), key=lambda i: len(encodings[i].ids))
        groups = [order[i : i + self.max_batch_size] for i in range(0, len(order), self.max_batch_size)]
        results = await asyncio.gather(*(self._score_group([encodings[i] for i in g]) for g in groups))
        out = np.empty((len(passages),), dtype=np.float32)
        for group, logits in zip(groups, results, strict=True):
            out[group] = logits
        if not np.isfinite(out).all():
            raise EmbedderError(f"model {self.model_name!r} returned a non-finite logit for query {query[:60]!r}")
        self.stats.texts += len(passages)
        return out

    async def _score_group(self, encodings: list[Encoding]) -> npt.NDArray[np.float32]:
        padded = pad_pairs(encodings, self.buckets)
        tensors = {
            name: padded[name].astype(np.int32 if kind == "INT32" else np.int64) for name, kind in self.model_inputs
        }
        logits = await self._infer_in_slot(tensors, RERANK_OUTPUT)
        if logits.shape != (len(encodings), 1):
            raise EmbedderError(
                f"Triton response from {self.model_name!r} has {RERANK_OUTPUT!r} of shape {logits.shape}; expected "
                f"({len(encodings)}, 1)"
            )
        scores: npt.NDArray[np.float32] = logits[:, 0].astype(np.float32)
        return scores
