"""The shipped support verifier on the session's real Triton (which always loads it, `infra.triton.served_models`):
`TritonVerifier.classify` returns probabilities equal to ONNX Runtime's on the same graph and the same request
tensors, in input order, and a clear SUPPORT pair out-scores an unrelated sentence on SUPPORT.

The reference runs the client's own request (pairs sorted by length, padded to its bucket) in ONNX Runtime: the int8
graph quantises activations per call over the whole batch (dynamic quantisation), so its output depends on the batch
a pair is sent in."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from agent.config.settings import Settings
from evals.train_verifier import SHIPPED
from tools.embedder import TritonEmbedder
from tools.embedder.pairs import pad_pairs
from tools.embedder.verifier import LOCAL_VERIFIER, TritonVerifier, get_verifier_spec, softmax
from tools.onnx_session import open_session

CLAIM = "Vitamin D deficiency is associated with low bone mineral density."
PAIRS = [
    (CLAIM, "Low serum 25-hydroxyvitamin D concentrations were associated with reduced bone mineral density."),
    (CLAIM, "The trains in the city ran on time during the festival weekend."),
    (CLAIM, "Participants were recruited from three hospitals between 2001 and 2005. " * 20),  # > 256 tokens
    ("Statins lower LDL cholesterol.", "Statin therapy did not change LDL cholesterol levels."),
]


def same_request_in_onnx_runtime(verifier: TritonVerifier, pairs: list[tuple[str, str]]) -> npt.NDArray[np.float32]:
    """Probabilities of `pairs` from the shipped graph in ONNX Runtime, sent as `verifier` sends them (one request)."""
    encodings = verifier.tokenizer.encode_batch(pairs)
    order = sorted(range(len(pairs)), key=lambda i: len(encodings[i].ids))
    tensors = pad_pairs([encodings[i] for i in order], verifier.buckets)
    session = open_session(SHIPPED)
    (logits,) = session.run(["logits"], {i.name: tensors[i.name] for i in session.get_inputs()})
    out = np.empty((len(pairs), 3), dtype=np.float32)
    out[order] = softmax(np.asarray(logits, dtype=np.float32))
    return out


async def test_triton_probabilities_equal_onnx_runtimes(embedder: TritonEmbedder, settings: Settings) -> None:
    spec = get_verifier_spec(LOCAL_VERIFIER)
    async with TritonVerifier(settings.triton_grpc_url, spec) as verifier:
        assert [n for n, _ in verifier.model_inputs] == ["input_ids", "attention_mask", "token_type_ids"]
        probs = await verifier.classify(PAIRS)
        assert (await verifier.classify([])).shape == (0, 3)
        expected = same_request_in_onnx_runtime(verifier, PAIRS)
    assert probs.shape == (len(PAIRS), 3) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(probs, expected, atol=1e-4)
    assert probs[0, 0] > probs[1, 0]
