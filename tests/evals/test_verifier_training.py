"""The shipped verifier matches its training record (`evals/results/verifier-training.json`): the int8 graph's
SHA-256 and size, its output shape under ONNX Runtime, and the thresholds of `VerifierSpec` (chosen on the held-out
train fold) equal what the record says."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evals.support_inference import onnx_classify
from evals.train_verifier import RESULTS, SHIPPED, sha256
from tools.embedder.verifier import LOCAL_VERIFIER, get_verifier_spec


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RESULTS.read_text())
    return data


def test_shipped_graph_is_the_recorded_one(record: dict[str, Any]) -> None:
    assert SHIPPED.is_file(), f"{SHIPPED} is missing: it ships in git (python -m evals.train_verifier makes it)"
    assert record["shipped"]["bytes"] == SHIPPED.stat().st_size
    assert record["shipped"]["sha256"] == sha256(SHIPPED)


def test_shipped_graph_gives_three_probabilities_per_pair() -> None:
    pairs = [
        ("Vitamin D deficiency is associated with low bone density.", "Low vitamin D was linked to low bone density."),
        ("Statins lower LDL cholesterol.", "The weather was mild in the spring of that year."),
    ]
    probs = onnx_classify(SHIPPED, get_verifier_spec(LOCAL_VERIFIER), pairs)
    assert probs.shape == (2, 3)
    assert probs.sum(axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)


def test_spec_thresholds_are_the_recorded_ones(record: dict[str, Any]) -> None:
    spec = get_verifier_spec(LOCAL_VERIFIER)
    assert spec.support_threshold == record["thresholds"]["support_threshold"]
    assert spec.contradict_threshold == record["thresholds"]["contradict_threshold"]
