"""The ONNX export's pooled graph (no servers): a tiny randomly initialised BERT exported with mean and with CLS
pooling equals the token-state path (the PyTorch model + `tools.pooling`), the staleness check tells an old
token-state graph from a current one, and the client's padding helper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infra.export_onnx import EXPORT_VERSION, EXPORT_VERSION_KEY, export_onnx, is_stale, quantize_int8
from tools.embedder import length_buckets, pad_to_bucket
from tools.model_specs import EMBEDDING_OUTPUT, Pooling
from tools.onnx_session import open_session, run_pooled
from tools.pooling import pool_and_normalize

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")

DIM = 32


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A 2-layer, 32-wide BERT with random weights, saved as a Hugging Face folder."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=DIM, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    model = transformers.BertModel(config).eval()
    folder = Path(tmp_path_factory.mktemp("tiny-bert"))
    model.save_pretrained(folder)
    return folder, model


def token_state_reference(
    model: Any, input_ids: np.ndarray[Any, Any], mask: np.ndarray[Any, Any], pooling: Pooling
) -> Any:
    with torch.no_grad():
        states = model(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    return pool_and_normalize(states.numpy(), mask, pooling)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_exported_graph_pools_like_the_token_state_reference(
    tiny_bert: tuple[Path, Any], tmp_path: Path, pooling: Pooling
) -> None:
    folder, model = tiny_bert
    out = export_onnx(folder, tmp_path / "model.onnx", pooling)
    assert is_stale(out) is None
    graph = onnx.load(str(out)).graph
    assert [o.name for o in graph.output] == [EMBEDDING_OUTPUT]
    assert [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim] == [0, DIM]  # (batch, DIM)
    # Three texts of different lengths padded into one batch: padding must not change any embedding.
    input_ids, mask = pad_to_bucket([[2, 5, 7, 9, 3], [2, 11, 3], [2, *range(20, 60), 3]], [8, 16, 64])
    served = run_pooled(open_session(out, threads=1), input_ids, mask)
    reference = token_state_reference(model, input_ids, mask, pooling)
    assert served.shape == (3, DIM) and served.dtype == np.float32
    assert np.abs(served - reference).max() <= 1e-5
    assert np.allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-6)
    other: Pooling = "mean" if pooling == "cls" else "cls"
    assert np.abs(served - token_state_reference(model, input_ids, mask, other)).max() > 1e-3  # pooling matters


def test_quantised_graph_keeps_the_contract(tiny_bert: tuple[Path, Any], tmp_path: Path) -> None:
    folder, _ = tiny_bert
    float_file = export_onnx(folder, tmp_path / "fp32.onnx", "mean")
    int8_file = quantize_int8(float_file, tmp_path / "int8.onnx")
    assert is_stale(int8_file) is None
    input_ids, mask = pad_to_bucket([[2, 5, 7, 3], [2, 9, 3]], [8])
    full, quantised = (run_pooled(open_session(f), input_ids, mask) for f in (float_file, int8_file))
    assert quantised.shape == (2, DIM)
    assert float((full * quantised).sum(axis=1).min()) > 0.9


def test_staleness_check_tells_old_token_state_graphs_apart(tmp_path: Path) -> None:
    helper, tp = onnx.helper, onnx.TensorProto

    def graph_file(name: str, output: str, shape: list[Any], version: str | None) -> Path:
        node = helper.make_node("Identity", ["x"], [output])
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", tp.FLOAT, shape)],
            [helper.make_tensor_value_info(output, tp.FLOAT, shape)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        if version is not None:
            helper.set_model_props(model, {EXPORT_VERSION_KEY: version})
        path = tmp_path / name
        onnx.save(model, str(path))
        return path

    assert "missing" in str(is_stale(tmp_path / "absent.onnx"))
    old = graph_file("old.onnx", "last_hidden_state", ["batch", "sequence", DIM], None)
    assert "last_hidden_state" in str(is_stale(old))
    unstamped = graph_file("unstamped.onnx", EMBEDDING_OUTPUT, ["batch", DIM], None)
    assert "export version None" in str(is_stale(unstamped))
    current = graph_file("current.onnx", EMBEDDING_OUTPUT, ["batch", DIM], EXPORT_VERSION)
    assert is_stale(current) is None
    (tmp_path / "garbage.onnx").write_bytes(b"not a protobuf")
    assert "unreadable" in str(is_stale(tmp_path / "garbage.onnx"))


def test_pad_to_bucket_pads_to_the_least_bucket() -> None:
    buckets = length_buckets(256)
    assert buckets == [32, 64, 128, 192, 256]
    input_ids, mask = pad_to_bucket([[101, 7, 102], list(range(40))], buckets)
    assert input_ids.shape == mask.shape == (2, 64) and input_ids.dtype == mask.dtype == np.int64
    assert input_ids[0, :3].tolist() == [101, 7, 102] and not input_ids[0, 3:].any()
    assert mask.sum(axis=1).tolist() == [3, 40]
    with pytest.raises(ValueError, match="more than the largest bucket 256"):
        pad_to_bucket([list(range(300))], buckets)
    with pytest.raises(ValueError, match="token_ids is empty"):
        pad_to_bucket([], buckets)
