"""Pooling and L2 normalisation in numpy: the reference for the pooling inside the served ONNX graph.

The served graphs pool on the server (`infra/export_onnx.py`), so the client never pools. This module is what that
graph is checked against (tests compare the Hugging Face model's token states pooled here with Triton's output) and
what the naive benchmark server uses. Mean pooling follows sentence-transformers'
`Pooling(pooling_mode_mean_tokens=True)` (mask-weighted mean over tokens); CLS pooling takes the first token, as bge
models do (FlagEmbedding). Both are then L2-normalised so that cosine similarity equals the dot product.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tools.model_specs import Pooling

FloatArray = npt.NDArray[np.float32]


def pool_and_normalize(
    last_hidden_state: FloatArray, attention_mask: npt.NDArray[np.int64], pooling: Pooling
) -> FloatArray:
    """Pool token states into L2-normalised sentence embeddings.

    Args:
        last_hidden_state: `(batch, seq, dim)` float32 encoder output.
        attention_mask: `(batch, seq)` int64, 1 for real tokens and 0 for padding.
        pooling: `mean` or `cls`.

    Returns:
        `(batch, dim)` float32, each row of unit L2 norm.

    Raises:
        ValueError: shapes disagree, or pooling is unknown.
    """
    if last_hidden_state.ndim != 3 or attention_mask.shape != last_hidden_state.shape[:2]:
        raise ValueError(
            f"expected last_hidden_state (batch, seq, dim) and attention_mask (batch, seq); "
            f"got {last_hidden_state.shape} and {attention_mask.shape}"
        )
    states = last_hidden_state.astype(np.float32, copy=False)
    if pooling == "mean":
        mask = attention_mask.astype(np.float32)[:, :, None]
        summed = (states * mask).sum(axis=1)
        pooled = summed / np.clip(mask.sum(axis=1), 1e-9, None)
    elif pooling == "cls":
        pooled = states[:, 0, :]
    else:
        raise ValueError(f"unknown pooling {pooling!r}; expected 'mean' or 'cls'")
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    result: FloatArray = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
    return result
