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

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tools.embedder.inputs import check_texts
from tools.embedder.pairs import PAIR_OUTPUT, PairModelClient, spec_named
from tools.model_specs import get_spec

RERANK_OUTPUT = PAIR_OUTPUT
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
    return spec_named(RERANKER_SPECS, name, "reranker")


class TritonReranker(PairModelClient[RerankerSpec]):
    """Async client for one Triton-served cross-encoder: `score(query, passages)` -> one logit per passage.

    Constructed as `PairModelClient` (url, spec: a `RERANKER_SPECS` entry, timeout_s, retries, tokenizer_path,
    options); reranking is on a question's path, so requests go at `PRIORITY_INTERACTIVE` unless `priority` is given.

    Use as `async with TritonReranker(...) as reranker: scores = await reranker.score(query, passages)`; keep one per
    process.
    """

    width = 1

    async def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]:
        """Relevance logits of (`query`, passage) for each passage, in order (`PairModelClient.pair_logits`).

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
        scores: npt.NDArray[np.float32] = (await self.pair_logits([(query, p) for p in passages]))[:, 0]
        return scores
