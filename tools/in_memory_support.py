"""Doubles of the support check's embedder and verifier (`tools.support.TextEmbedder`, `PairClassifier`), with no
server: for tests of the answer path, like `tools.in_memory.InMemoryCollection` for retrieval. The real verifier is
tested against the model served by Triton.

- `HashedEmbedder`: `tools.in_memory.hashed_vector` of each text (texts sharing no word have cosine 0).
- `LexicalVerifier`: P(SUPPORT) grows with the share of the claim's words the evidence holds; when the two differ in
  negation (`not`, `no`, `never`, `without`) the same mass goes to CONTRADICT. Deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from tools.in_memory import HASH_DIM, hashed_vector

_WORD = re.compile(r"\w+")
_NEGATIONS = frozenset({"not", "no", "never", "without", "cannot"})


class HashedEmbedder:
    """`embed(texts)` -> `(len(texts), HASH_DIM)` float32 hashed bag-of-words vectors (L2-normalised)."""

    def __init__(self) -> None:
        self.calls = 0

    async def embed(
        self, texts: Sequence[str], kind: Literal["query", "document"] = "document"
    ) -> npt.NDArray[np.float32]:
        """Hashed vectors of `texts`, in order (`kind` is ignored)."""
        self.calls += 1
        if not texts:
            return np.zeros((0, HASH_DIM), dtype=np.float32)
        return np.stack([hashed_vector(t) for t in texts])


class LexicalVerifier:
    """`classify(pairs)` -> `(len(pairs), 3)` float32 (SUPPORT, CONTRADICT, NOT_ENOUGH_INFO) from word overlap."""

    def __init__(self) -> None:
        self.pairs_seen = 0

    async def classify(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.float32]:
        """Probabilities of each (claim, evidence) pair; rows sum to 1."""
        self.pairs_seen += len(pairs)
        out = np.zeros((len(pairs), 3), dtype=np.float32)
        for row, (claim, evidence) in enumerate(pairs):
            claim_words = {w.lower() for w in _WORD.findall(claim)}
            evidence_words = {w.lower() for w in _WORD.findall(evidence)}
            content = claim_words - _NEGATIONS
            share = len(content & evidence_words) / len(content) if content else 0.0
            negated = bool(claim_words & _NEGATIONS) != bool(evidence_words & _NEGATIONS)
            column = 1 if negated else 0
            out[row, column] = 0.95 * share
            out[row, 2] = 1.0 - out[row, column]
        return out
