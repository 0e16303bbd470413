"""What the cross-encoder trainers share (`evals.train_reranker`, `evals.train_verifier`): seeding, one optimiser
step with its progress line, and the check of an exported ONNX graph against the trained model.

torch and onnxruntime are imported inside the functions (the eval extras), as the trainers do.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tools.embedder.pairs import pad_pairs, pair_tokenizer

log = logging.getLogger(__name__)

LOG_EVERY = 20
"""Steps between two progress lines."""


def seed_everything(seed: int, threads: int) -> None:
    """Seed Python's, NumPy's and torch's generators with `seed`; let torch use `threads` CPU threads."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)


def optimizer_step(model: Any, loss: Any, optimizer: Any, schedule: Any) -> float:
    """Backpropagate `loss` (a scalar tensor), clip `model`'s gradients to norm 1, step `optimizer` and `schedule`
    and zero the gradients.

    Returns:
        the loss, as a float.
    """
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()
    return float(loss.item())


def log_progress(epoch: int, step: int, steps: int, losses: Sequence[float], start: float) -> None:
    """Log the mean loss of the last `LOG_EVERY` steps and the seconds since `start` (`time.perf_counter`) after
    every `LOG_EVERY`-th step (0-based `epoch` and `step`, of `steps` in the epoch)."""
    if (step + 1) % LOG_EVERY == 0:
        last = losses[-LOG_EVERY:]
        log.info(
            "epoch %d step %d/%d: loss %.4f (mean of last %d), %.0f s",
            epoch + 1,
            step + 1,
            steps,
            sum(last) / len(last),
            LOG_EVERY,
            time.perf_counter() - start,
        )


def check_export(
    model: Any, onnx_file: Path, pairs: Sequence[tuple[str, str]], tokenizer_file: Path, max_tokens: int
) -> float:
    """Largest |logit difference| between the trained model and its ONNX graph (ONNX Runtime, CPU) on `pairs`,
    tokenised by `tokenizer_file` (a `tokenizer.json`) at `max_tokens`.

    Raises:
        ValueError: the difference exceeds 1e-3 (a broken export).
    """
    import onnxruntime as ort
    import torch

    encodings = pair_tokenizer(tokenizer_file, max_tokens).encode_batch(list(pairs))
    tensors = pad_pairs(encodings, [max(len(e.ids) for e in encodings)])
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in tensors.items()}).logits.numpy()
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    (got,) = session.run(["logits"], {i.name: tensors[i.name] for i in session.get_inputs()})
    diff = float(np.abs(np.asarray(got) - expected).max())
    if diff > 1e-3:
        raise ValueError(f"{onnx_file}: ONNX logits differ from the trained model's by {diff:.2e} (> 1e-3)")
    return diff
