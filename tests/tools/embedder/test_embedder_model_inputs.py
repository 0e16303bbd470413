"""The embedder sends every input the served model declares (real Triton, real models): an all-MiniLM-L6-v2 export
that keeps `token_type_ids` as a third input embeds like the shipped two-input graph, and a model declaring an
input the client cannot fill is refused once, at connect, naming the input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.config.settings import Settings
from tools.embedder import TritonEmbedder
from tools.errors import EmbedderError
from tools.model_specs import EMBEDDING_OUTPUT

TEXTS = [
    "Vitamin D deficiency is associated with low bone mineral density.",
    "short",
    "A considerably longer sentence about the microstructural development of cerebral white matter in preterm "
    "infants, as assessed by diffusion tensor imaging at term-equivalent age.",
]


def export_with_token_type_ids(weights_dir: Path, out_file: Path) -> bytes:
    """all-MiniLM-L6-v2 exported as the shipped graph is (TorchScript exporter, opset 17, mean pooling and L2 norm
    inside) but with `token_type_ids` kept as a graph input, as Hugging Face's own ONNX exports of BERT models do.
    Returns the ONNX file's bytes."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    encoder = transformers.AutoModel.from_pretrained(str(weights_dir)).eval()
    module: Any = torch.nn.Module

    class ThreeInputs(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            states = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1, eps=1e-12)

    names = ["input_ids", "attention_mask", "token_type_ids"]
    dummy = torch.ones((2, 16), dtype=torch.int64)
    with torch.no_grad():
        torch.onnx.export(
            ThreeInputs().eval(),
            (dummy, dummy, torch.zeros_like(dummy)),
            str(out_file),
            input_names=names,
            output_names=[EMBEDDING_OUTPUT],
            dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names}, EMBEDDING_OUTPUT: {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    return out_file.read_bytes()


def graph_with_extra_input(extra: str) -> bytes:
    """A tiny ONNX graph with the embedder's output that also declares input `extra` (INT64 `(batch, seq)`)."""
    onnx = pytest.importorskip("onnx")
    helper, tp = onnx.helper, onnx.TensorProto
    inputs = [
        helper.make_tensor_value_info(name, tp.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask", extra)
    ]
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=tp.FLOAT),
        helper.make_node("ReduceSum", ["ids_f", "axes"], ["col"], keepdims=1),
        helper.make_node("Expand", ["col", "shape"], [EMBEDDING_OUTPUT]),
    ]
    graph = helper.make_graph(
        nodes,
        "extra_input",
        inputs,
        [helper.make_tensor_value_info(EMBEDDING_OUTPUT, tp.FLOAT, ["batch", 384])],
        [helper.make_tensor("axes", tp.INT64, [1], [1]), helper.make_tensor("shape", tp.INT64, [2], [1, 384])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def with_inputs(config: dict[str, Any], name: str, extra: str) -> dict[str, Any]:
    """`config` (Triton's JSON form) renamed to `name`, declaring input `extra` after the shipped two."""
    declared = [*config["input"], {**config["input"][0], "name": extra}]
    return {**config, "name": name, "input": declared}


async def test_model_declaring_token_type_ids_embeds_like_the_shipped_graph(
    embedder: TritonEmbedder, settings: Settings, tmp_path: Path
) -> None:
    name = "minilm-token-type-ids"
    onnx_bytes = export_with_token_type_ids(embedder.spec.weights_dir(), tmp_path / "model.onnx")
    config = with_inputs(await embedder.model_config(), name, "token_type_ids")
    await embedder.load_model(name, config=config, files={"file:1/model.onnx": onnx_bytes})
    try:
        async with TritonEmbedder(settings.triton_grpc_url, embedder.spec, model_name=name) as client:
            assert [n for n, _ in client.model_inputs] == ["input_ids", "attention_mask", "token_type_ids"]
            served = await client.embed(TEXTS)
            query = await client.embed([TEXTS[0]], "query")
        assert np.abs(served - await embedder.embed(TEXTS)).max() <= 1e-5
        assert np.abs(query - await embedder.embed([TEXTS[0]], "query")).max() <= 1e-5
    finally:
        await embedder.unload_model(name)


async def test_model_declaring_an_input_the_client_cannot_fill_fails_at_connect(
    embedder: TritonEmbedder, settings: Settings
) -> None:
    name = "minilm-position-ids"
    config = with_inputs(await embedder.model_config(), name, "position_ids")
    await embedder.load_model(name, config=config, files={"file:1/model.onnx": graph_with_extra_input("position_ids")})
    try:
        client = TritonEmbedder(settings.triton_grpc_url, embedder.spec, model_name=name)
        with pytest.raises(EmbedderError, match=r"declares input 'position_ids'.*expected only input_ids"):
            await client.connect()
        with pytest.raises(EmbedderError, match="not connected"):
            await client.embed(["never sent"])
    finally:
        await embedder.unload_model(name)
