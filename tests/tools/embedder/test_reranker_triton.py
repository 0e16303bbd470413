"""The reranker on a real Triton: a tiny cross-encoder built here (random-initialised 2-layer BERT with a one-logit
head, exported by `infra.export_reranker` to the graph contract of the shipped config.pbtxt), loaded on the session's
Triton and scored through `TritonReranker`: the logits equal the torch model's on the same pairs, in input order,
long passages are truncated at the model limit, and the rerank step orders by them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from agent.config.settings import Settings
from infra.export_reranker import export_cross_encoder
from tests.conftest import REPO_ROOT
from tools.embedder import TritonEmbedder
from tools.embedder.pairs import pad_pairs
from tools.embedder.reranker import LOCAL_RERANKER, TritonReranker, get_reranker_spec
from tools.errors import EmbedderError
from tools.records import ChunkHit
from tools.rerank import rerank

REPO = REPO_ROOT
QUERY = "Vitamin D deficiency is associated with low bone mineral density."
PASSAGES = [
    "Low serum 25-hydroxyvitamin D concentrations were associated with reduced bone mineral density in adults.",
    "short",
    "Diffusion tensor imaging of cerebral white matter in preterm infants at term-equivalent age. " * 30,  # > 256
    "Statins lower LDL cholesterol.",
]


def tiny_cross_encoder() -> Any:
    """A seeded, random-initialised BERT cross-encoder small enough to build and export in seconds."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=30522,  # the MiniLM tokenizer's vocabulary
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        type_vocab_size=2,
        num_labels=1,
    )
    return transformers.BertForSequenceClassification(config).eval()


def served_config(name: str) -> dict[str, Any]:
    """The shipped reranker's config.pbtxt in Triton's JSON form, renamed to `name`."""
    text = (REPO / "model_repository" / LOCAL_RERANKER / "config.pbtxt").read_text()
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    config.name = name
    data: dict[str, Any] = json_format.MessageToDict(config, preserving_proto_field_name=True)
    return data


@pytest.fixture(scope="module")
async def tiny_reranker(embedder: TritonEmbedder, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(name, torch model) of the tiny cross-encoder loaded on the session's Triton; unloaded afterwards."""
    model = tiny_cross_encoder()
    onnx_file = export_cross_encoder(model, tmp_path_factory.mktemp("reranker") / "model.onnx")
    name = "tiny-reranker"
    await embedder.load_model(name, config=served_config(name), files={"file:1/model.onnx": onnx_file.read_bytes()})
    try:
        yield name, model
    finally:
        await embedder.unload_model(name)


def torch_logits(model: Any, client: TritonReranker, query: str, passages: list[str]) -> np.ndarray:
    import torch

    encodings = client.tokenizer.encode_batch([(query, p) for p in passages])
    tensors = pad_pairs(encodings, [max(len(e.ids) for e in encodings)])
    with torch.no_grad():
        logits = model(**{k: torch.from_numpy(v) for k, v in tensors.items()}).logits
    return np.asarray(logits[:, 0].numpy(), dtype=np.float32)


async def test_triton_logits_equal_the_models_in_input_order(tiny_reranker: Any, settings: Settings) -> None:
    name, model = tiny_reranker
    spec = get_reranker_spec(LOCAL_RERANKER)
    async with TritonReranker(settings.triton_grpc_url, spec, model_name=name) as client:
        assert [n for n, _ in client.model_inputs] == ["input_ids", "attention_mask", "token_type_ids"]
        scores = await client.score(QUERY, PASSAGES)
        assert scores.shape == (len(PASSAGES),) and scores.dtype == np.float32
        np.testing.assert_allclose(scores, torch_logits(model, client, QUERY, PASSAGES), atol=1e-4)
        # the long passage was cut at the model limit, with both segments present
        encoding = client.tokenizer.encode(QUERY, PASSAGES[2])
        assert len(encoding.ids) == spec.max_tokens and set(encoding.type_ids) == {0, 1}
        assert (await client.score(QUERY, [])).shape == (0,)
        with pytest.raises(EmbedderError, match="empty or whitespace"):
            await client.score(QUERY, ["fine", "  "])


async def test_more_pairs_than_a_batch_come_back_in_order(tiny_reranker: Any, settings: Settings) -> None:
    name, model = tiny_reranker
    passages = [f"passage number {i} " * (1 + i % 7) for i in range(70)]  # 2 requests of max_batch_size 64
    async with TritonReranker(settings.triton_grpc_url, get_reranker_spec(LOCAL_RERANKER), model_name=name) as client:
        assert client.max_batch_size < len(passages)
        scores = await client.score(QUERY, passages)
        np.testing.assert_allclose(scores, torch_logits(model, client, QUERY, passages), atol=1e-4)
        ranked = [(ChunkHit(f"d{i}#0", f"d{i}", "", p, "", 0.0), 0.0) for i, p in enumerate(passages)]
        out = await rerank(QUERY, ranked, client, depth=70, top_k=5)
    assert [h.doc_id for h, _ in out] == [f"d{i}" for i in np.argsort(-scores, kind="stable")[:5]]


async def test_a_model_without_logits_is_refused_at_connect(embedder: TritonEmbedder, settings: Settings) -> None:
    client = TritonReranker(settings.triton_grpc_url, get_reranker_spec(LOCAL_RERANKER), model_name=embedder.model_name)
    with pytest.raises(EmbedderError, match="expected 'logits' with dims \\[1\\]"):
        await client.connect()
