"""The shipped support verifier on the session's real Triton (which always loads it, `infra.triton.served_models`):
`TritonVerifier.classify` returns probabilities equal to ONNX Runtime's on the same graph, in input order, and a
clear SUPPORT pair out-scores an unrelated sentence on SUPPORT."""

from __future__ import annotations

import numpy as np

from agent.config.settings import Settings
from evals.support_inference import onnx_classify
from evals.train_verifier import SHIPPED
from tools.embedder import TritonEmbedder
from tools.embedder.verifier import LOCAL_VERIFIER, TritonVerifier, get_verifier_spec

CLAIM = "Vitamin D deficiency is associated with low bone mineral density."
PAIRS = [
    (CLAIM, "Low serum 25-hydroxyvitamin D concentrations were associated with reduced bone mineral density."),
    (CLAIM, "The trains in the city ran on time during the festival weekend."),
    (CLAIM, "Participants were recruited from three hospitals between 2001 and 2005. " * 20),  # > 256 tokens
    ("Statins lower LDL cholesterol.", "Statin therapy did not change LDL cholesterol levels."),
]


async def test_triton_probabilities_equal_onnx_runtimes(embedder: TritonEmbedder, settings: Settings) -> None:
    spec = get_verifier_spec(LOCAL_VERIFIER)
    async with TritonVerifier(settings.triton_grpc_url, spec) as verifier:
        assert [n for n, _ in verifier.model_inputs] == ["input_ids", "attention_mask", "token_type_ids"]
        probs = await verifier.classify(PAIRS)
        assert (await verifier.classify([])).shape == (0, 3)
    assert probs.shape == (len(PAIRS), 3) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(probs, onnx_classify(SHIPPED, spec, PAIRS), atol=1e-4)
    assert probs[0, 0] > probs[1, 0]
