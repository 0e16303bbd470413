"""The support verifier client: `TritonVerifier`, a 3-way cross-encoder served by Triton, over the embedder's client
machinery.

A verifier reads a claim (an answer's sentence) and its evidence together and says whether the evidence SUPPORTs it,
CONTRADICTs it or gives NOT ENOUGH INFO (the label set of SciFact: Wadden et al., "Fact or Fiction: Verifying
Scientific Claims", EMNLP 2020). Pairs are tokenised as the model was trained (`evals/train_verifier.py`): `[CLS]
claim [SEP] evidence [SEP]` with segment ids 0 then 1 (BERT's pair template from the model's `tokenizer.json`),
truncated longest-first to the model's `max_tokens`, sorted by length, right-padded to the embedder's length buckets
(`tools.embedder.inputs.length_buckets`), split into requests of at most the model's `max_batch_size` and sent
concurrently through `TritonModelClient` (in-flight slots, retries, stub-failure handling, request priority).

Graph contract (`evals/train_verifier.py` exports it with `infra.export_reranker.export_cross_encoder`,
`config.pbtxt` declares it): inputs `input_ids`, `attention_mask`, `token_type_ids`, INT64 `(batch, seq)`; output
`logits`, FP32 `(batch, 3)`, columns in `SUPPORT_LABELS` order. The client returns their softmax.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding

from tools.embedder.client import PRIORITY_INTERACTIVE, ClientOptions, TritonModelClient
from tools.embedder.errors import EmbedderError
from tools.embedder.inputs import check_texts
from tools.embedder.reranker import pad_pairs, pair_tokenizer
from tools.model_specs import get_spec
from tools.support import DecisionRule

VERIFY_OUTPUT = "logits"
"""Name of the verifier graph's output: three logits per pair, FP32 `(batch, 3)`, in `SUPPORT_LABELS` order."""

SUPPORT_LABELS: tuple[str, str, str] = ("SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO")
"""The labels of the verifier's output columns, in order (SciFact's label set)."""

LOCAL_VERIFIER = "minilm-l6-scifact-verifier"
"""The verifier of the local stack: all-MiniLM-L6-v2's encoder with a 3-label head, trained on SciFact's train split
by `python -m evals.train_verifier` (in-domain: trained on SciFact train); its int8 graph ships in git."""


@dataclass(frozen=True)
class VerifierSpec:
    """Facts about one ONNX support verifier served by Triton, and its decision rule (`label_of`).

    Attributes:
        name: Triton model name (directory under `model_repository/`).
        source: where the weights come from and how they were trained.
        support_threshold: least P(SUPPORT) for the SUPPORT label (chosen on the held-out train fold by
            `evals.train_verifier`; equals `evals/results/verifier-training.json`'s `thresholds`).
        contradict_threshold: least P(CONTRADICT) for the CONTRADICT label (likewise).
        max_tokens: longest pair in tokens, special tokens included.
        tokenizer_model: the embedding model (`tools.model_specs`) whose packaged tokenizer the verifier uses.
    """

    name: str
    source: str
    support_threshold: float
    contradict_threshold: float
    max_tokens: int = 256
    tokenizer_model: str = "all-minilm-l6-v2"

    def tokenizer_file(self) -> Path:
        """The packaged `tokenizer.json` of `tokenizer_model` (`tools.model_specs`)."""
        return get_spec(self.tokenizer_model).tokenizer_file()


VERIFIER_SPECS: dict[str, VerifierSpec] = {
    spec.name: spec
    for spec in (
        VerifierSpec(
            name=LOCAL_VERIFIER,
            source="sentence-transformers/all-MiniLM-L6-v2 + 3-label head, trained on SciFact train "
            "(evals/train_verifier.py), int8 (ONNX Runtime dynamic quantisation)",
            # chosen on the held-out train fold: evals/results/verifier-training.json "thresholds"
            support_threshold=0.3,
            contradict_threshold=0.75,
        ),
    )
}


def get_verifier_spec(name: str) -> VerifierSpec:
    """The description of verifier `name`.

    Raises:
        ValueError: unknown verifier; the message lists the known ones.
    """
    try:
        return VERIFIER_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown verifier model {name!r}; expected one of {sorted(VERIFIER_SPECS)}") from None


def label_of(probs: npt.ArrayLike, spec: VerifierSpec) -> tuple[str, float]:
    """The decision rule at `spec`'s thresholds (`tools.support.DecisionRule`, the one the answer path uses):
    SUPPORT when P(SUPPORT) >= `spec.support_threshold`, CONTRADICT when P(CONTRADICT) >= `spec.contradict_threshold`,
    the likelier of the two when both hold (SUPPORT on a tie), NOT_ENOUGH_INFO when neither does.

    Args:
        probs: one pair's probabilities, 3 floats in `SUPPORT_LABELS` order (a row of `TritonVerifier.classify`).

    Returns:
        the label (one of `SUPPORT_LABELS`) and its probability.

    Raises:
        ValueError: `probs` is not 3 numbers.
    """
    row = np.asarray(probs, dtype=np.float64).reshape(-1)
    if row.shape != (3,):
        raise ValueError(f"probs has shape {row.shape}; expected 3 probabilities in {SUPPORT_LABELS} order")
    label = DecisionRule(spec.support_threshold, spec.contradict_threshold).label(row.astype(np.float32))
    return label, float(row[SUPPORT_LABELS.index(label)])


def softmax(logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Row-wise softmax of `(n, k)` logits (shifted by the row maximum for stability), float32."""
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    probs: npt.NDArray[np.float32] = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
    return probs


class TritonVerifier(TritonModelClient):
    """Async client for one Triton-served support verifier: `classify(pairs)` -> `(len(pairs), 3)` probabilities.

    Args:
        url: Triton gRPC endpoint(s), as `TritonEmbedder`'s.
        spec: the verifier's description (`VERIFIER_SPECS`).
        tokenizer_path: its tokenizer.json (or the folder holding it); default: the packaged one
            (`VerifierSpec.tokenizer_file`).
        options: the keyword-only options of `TritonModelClient` (`ClientOptions`); `priority` defaults to
            `PRIORITY_INTERACTIVE` (verification is on an answer's path).

    Raises:
        ValueError: as `TritonModelClient`. FileNotFoundError: no tokenizer found.

    Use as `async with TritonVerifier(...) as verifier: probs = await verifier.classify(pairs)`; keep one per process.
    """

    def __init__(
        self,
        url: str,
        spec: VerifierSpec,
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
        self.spec: VerifierSpec = spec

    def _check_outputs(self, outputs: dict[str, list[int]], endpoint: str) -> None:
        """Raises:
        EmbedderError: the model does not serve `logits` with dims [3] (one logit per label).
        """
        if outputs.get(VERIFY_OUTPUT) != [len(SUPPORT_LABELS)]:
            raise EmbedderError(
                f"model {self.model_name!r} on Triton at {endpoint} serves outputs {outputs}; expected "
                f"{VERIFY_OUTPUT!r} with dims [3] ({', '.join(SUPPORT_LABELS)}: a verifier exported by `python -m "
                "evals.train_verifier` with its config.pbtxt)"
            )

    async def classify(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        """Label probabilities of each (claim, evidence) pair, in order.

        Args:
            pairs: (the sentence being checked, the evidence text) per pair.

        Returns:
            `(len(pairs), 3)` float32 probabilities (softmax of the logits), columns in `SUPPORT_LABELS` order, each
            row summing to 1; `(0, 3)` for no pairs.

        Raises:
            EmbedderOverloadedError: Triton or this client refused for lack of capacity.
            EmbedderError: not connected, a blank claim or evidence, Triton errors after retries, a timeout, a
                response of another shape, or a non-finite logit.
        """
        self._pool.client(0)  # not connected: EmbedderError before any work
        if not pairs:
            return np.zeros((0, len(SUPPORT_LABELS)), dtype=np.float32)
        check_texts([c for c, _ in pairs])
        check_texts([e for _, e in pairs])
        encodings = self.tokenizer.encode_batch(list(pairs))
        order = sorted(range(len(pairs)), key=lambda i: len(encodings[i].ids))
        groups = [order[i : i + self.max_batch_size] for i in range(0, len(order), self.max_batch_size)]
        results = await asyncio.gather(*(self._classify_group([encodings[i] for i in g]) for g in groups))
        logits = np.empty((len(pairs), len(SUPPORT_LABELS)), dtype=np.float32)
        for group, rows in zip(groups, results, strict=True):
            logits[group] = rows
        if not np.isfinite(logits).all():
            raise EmbedderError(f"model {self.model_name!r} returned a non-finite logit for {len(pairs)} pairs")
        self.stats.texts += len(pairs)
        return softmax(logits)

    async def _classify_group(self, encodings: list[Encoding]) -> npt.NDArray[np.float32]:
        padded = pad_pairs(encodings, self.buckets)
        tensors = {
            name: padded[name].astype(np.int32 if kind == "INT32" else np.int64) for name, kind in self.model_inputs
        }
        logits = await self._infer_in_slot(tensors, VERIFY_OUTPUT)
        if logits.shape != (len(encodings), len(SUPPORT_LABELS)):
            raise EmbedderError(
                f"Triton response from {self.model_name!r} has {VERIFY_OUTPUT!r} of shape {logits.shape}; expected "
                f"({len(encodings)}, 3)"
            )
        rows: npt.NDArray[np.float32] = logits.astype(np.float32)
        return rows
