"""The verifier's pure parts: its decision rule (`label_of`), the softmax of its logits, and its spec lookup."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tools.embedder.verifier import LOCAL_VERIFIER, SUPPORT_LABELS, get_verifier_spec, label_of, softmax

SPEC = replace(get_verifier_spec(LOCAL_VERIFIER), support_threshold=0.6, contradict_threshold=0.3)


def test_label_of_applies_each_threshold_and_prefers_the_likelier_label() -> None:
    for probs, label, p in (
        ([0.65, 0.05, 0.30], "SUPPORT", 0.65),
        ([0.55, 0.05, 0.40], "NOT_ENOUGH_INFO", 0.40),
        ([0.20, 0.35, 0.45], "CONTRADICT", 0.35),
    ):
        got, prob = label_of(probs, SPEC)
        assert got == label and prob == pytest.approx(p)
    # both thresholds hold: the likelier of SUPPORT and CONTRADICT
    assert label_of([0.61, 0.39, 0.0], SPEC)[0] == "SUPPORT"
    assert label_of(np.array([0.0, 0.9, 0.1], dtype=np.float32), SPEC)[0] == "CONTRADICT"
    with pytest.raises(ValueError, match="expected 3 probabilities"):
        label_of([0.5, 0.5], SPEC)


def test_softmax_rows_sum_to_one_in_label_order() -> None:
    probs = softmax(np.array([[2.0, 0.0, -1.0], [1000.0, 0.0, 0.0]], dtype=np.float32))
    assert probs.dtype == np.float32 and probs.shape == (2, len(SUPPORT_LABELS))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    assert probs[0].argmax() == 0 and probs[1, 0] == pytest.approx(1.0)


def test_unknown_verifier_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=LOCAL_VERIFIER):
        get_verifier_spec("nope")
