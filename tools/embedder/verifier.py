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

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tools.embedder.pairs import PAIR_OUTPUT, PairModelClient, spec_named
from tools.model_specs import get_spec
from tools.support import DecisionRule

VERIFY_OUTPUT = PAIR_OUTPUT
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
    return spec_named(VERIFIER_SPECS, name, "verifier")


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


class TritonVerifier(PairModelClient[VerifierSpec]):
    """Async client for one Triton-served support verifier: `classify(pairs)` -> `(len(pairs), 3)` probabilities.

    Constructed as `PairModelClient` (url, spec: a `VERIFIER_SPECS` entry, timeout_s, retries, tokenizer_path,
    options); verification is on an answer's path, so requests go at `PRIORITY_INTERACTIVE` unless `priority` is
    given.

    Use as `async with TritonVerifier(...) as verifier: probs = await verifier.classify(pairs)`; keep one per process.
    """

    width = len(SUPPORT_LABELS)

    async def classify(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        """Label probabilities of each (claim, evidence) pair, in order (`PairModelClient.pair_logits`, softmaxed).

        Args:
            pairs: (the sentence being checked, the evidence text) per pair.

        Returns:
            `(len(pairs), 3)` float32 probabilities, columns in `SUPPORT_LABELS` order, each row summing to 1;
            `(0, 3)` for no pairs.

        Raises:
            EmbedderOverloadedError: Triton or this client refused for lack of capacity.
            EmbedderError: not connected, a blank claim or evidence, Triton errors after retries, a timeout, a
                response of another shape, or a non-finite logit.
        """
        return softmax(await self.pair_logits(pairs))
