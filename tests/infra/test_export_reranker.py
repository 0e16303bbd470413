"""`infra.export_reranker --fp16`: the production reranker (bge-reranker-v2-m3, 568 M parameters) is 2.27 GB in FP32,
over protobuf's 2 GiB for one `.onnx` file, so it ships in FP16. A tiny random XLM-RoBERTa cross-encoder (the
reranker's architecture) exported both ways: FP16 weights in one file, the graph contract unchanged (INT64 inputs,
FP32 logits) and the logits equal to the torch model's; an FP32 export over the limit is refused with what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infra.export_reranker import PROTOBUF_LIMIT_BYTES, export_cross_encoder


def tiny_xlm_roberta() -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.XLMRobertaConfig(
        vocab_size=1000,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        type_vocab_size=1,
        num_labels=1,
    )
    return transformers.XLMRobertaForSequenceClassification(config).eval()


def test_fp16_export_keeps_the_contract_in_one_file(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    torch = pytest.importorskip("torch")
    model = tiny_xlm_roberta()
    ids = torch.randint(5, 1000, (3, 12))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits.numpy()
    out = export_cross_encoder(model, tmp_path / "1" / "model.onnx", fp16=True)
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx"], "one file, no external data, no scratch"
    graph = onnx.load(str(out)).graph
    assert {init.data_type for init in graph.initializer} == {onnx.TensorProto.FLOAT16}
    assert [(i.name, i.type.tensor_type.elem_type) for i in graph.input] == [
        ("input_ids", onnx.TensorProto.INT64),
        ("attention_mask", onnx.TensorProto.INT64),
    ]
    assert [(o.name, o.type.tensor_type.elem_type) for o in graph.output] == [("logits", onnx.TensorProto.FLOAT)]
    (logits,) = ort.InferenceSession(str(out)).run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    assert logits.dtype == np.float32 and logits.shape == (3, 1)
    np.testing.assert_allclose(logits, expected, atol=1e-2)


def test_fp32_weights_over_two_gib_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is checked from the parameter count (the real model is not built here): a model whose FP32 weights
    reach 2 GiB must be exported with --fp16."""
    model = tiny_xlm_roberta()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    monkeypatch.setattr("infra.export_reranker.PROTOBUF_LIMIT_BYTES", weight_bytes)
    with pytest.raises(ValueError, match="--fp16"):
        export_cross_encoder(model, tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()
    export_cross_encoder(model, tmp_path / "model.onnx", fp16=True)  # half of it fits
    assert PROTOBUF_LIMIT_BYTES == 2**31
