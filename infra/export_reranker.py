"""Export a Hugging Face cross-encoder (`AutoModelForSequenceClassification` with one label) to ONNX for Triton:
`model_repository/<reranker>/1/model.onnx`.

Graph contract (matches the reranker's `config.pbtxt` and `tools.embedder.reranker`): inputs `input_ids`,
`attention_mask` and, for models with segment embeddings (BERT), `token_type_ids`, INT64 `(batch, seq)`; output
`logits`, FP32 `(batch, 1)` (the raw relevance logit, no sigmoid). Batch and sequence axes are dynamic. XLM-RoBERTa
models (`BAAI/bge-reranker-v2-m3`) take no `token_type_ids` (their config has `type_vocab_size: 1`).

Uses the TorchScript exporter (`torch.onnx.export(..., dynamo=False, opset_version=17)`), as `infra.export_onnx`.
`--fp16` exports the weights and activations in float16 (the output stays FP32): bge-reranker-v2-m3 has 568 M
parameters, 2.27 GB in FP32, over protobuf's 2 GiB limit for one `.onnx` file (the exporter would write external data
files beside it); in FP16 it is one 1.14 GB file, and ONNX Runtime's TensorRT provider builds FP16 engines anyway.
Usage (production reranker; weights are a local Hugging Face folder):

    python -m infra.export_reranker --weights /path/to/bge-reranker-v2-m3 --fp16 \
        --out model_repository/bge-reranker-v2-m3/1/model.onnx

The local cross-encoder is trained and exported by `python -m evals.train_reranker`.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from infra.export_onnx import OPSET

log = logging.getLogger(__name__)

RERANK_OUTPUT = "logits"
"""The graph's only output: `(batch, 1)` float32 relevance logits (`tools.embedder.reranker.RERANK_OUTPUT`)."""


def input_names(model: Any) -> list[str]:
    """The graph inputs of cross-encoder `model` (a Hugging Face model): `input_ids`, `attention_mask`, and
    `token_type_ids` when its config has more than one segment type (BERT: 2; XLM-RoBERTa: 1)."""
    names = ["input_ids", "attention_mask"]
    if int(getattr(model.config, "type_vocab_size", 1) or 1) > 1:
        names.append("token_type_ids")
    return names


PROTOBUF_LIMIT_BYTES = 2**31
"""Largest `.onnx` file protobuf can serialise as one message (2 GiB); larger models need external data."""


def export_cross_encoder(model: Any, out_file: Path, num_labels: int = 1, *, fp16: bool = False) -> Path:
    """Write cross-encoder `model` (a Hugging Face `AutoModelForSequenceClassification` with `num_labels` labels)
    to `out_file` as ONNX with the graph contract above, atomically (through `<out_file>.tmp`); the output `logits`
    is `(batch, num_labels)`: 1 for a reranker, 3 for the support verifier (`tools.embedder.verifier`). With `fp16`
    the graph computes in float16 and casts its logits to float32, so the contract (FP32 `logits`) is unchanged.

    Returns:
        `out_file`.

    Raises:
        ValueError: the model has another number of labels than `num_labels`, or its FP32 weights are over
            protobuf's 2 GiB (export with `fp16`).
    """
    import torch

    if int(model.config.num_labels) != num_labels:
        raise ValueError(
            f"cross-encoder has {model.config.num_labels} labels; expected {num_labels}"
            + (" (one relevance logit)" if num_labels == 1 else "")
        )
    names = input_names(model)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if fp16:
        weight_bytes //= 2
    if weight_bytes >= PROTOBUF_LIMIT_BYTES:
        raise ValueError(
            f"the weights are {weight_bytes / 1e9:.2f} GB, over protobuf's 2 GiB for one .onnx file: export with --fp16"
        )

    class Logits(torch.nn.Module):
        """The model's `logits` from its named inputs, positionally (the exporter's calling convention)."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            logits: torch.Tensor = self.inner(**dict(zip(names, tensors, strict=True))).logits
            return logits

    wrapper = Logits(model).eval()
    dummy = tuple(torch.ones((2, 16), dtype=torch.int64) for _ in names)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_suffix(".onnx.tmp")
    # FP32 first, into a scratch folder (over 2 GiB the exporter writes external data files beside the graph), then,
    # with fp16, converted by ONNX Runtime's float16 converter (inputs and output keep their types) into one file.
    # Tracing a `.half()` model on the CPU instead gives a graph that mixes float and float16 inputs of one op.
    scratch = Path(tempfile.mkdtemp(prefix=".export-", dir=out_file.parent))
    traced = scratch / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(
            wrapper,
            dummy,
            str(traced),
            input_names=names,
            output_names=[RERANK_OUTPUT],
            dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names}, RERANK_OUTPUT: {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
    try:
        if fp16:
            import onnx
            from onnxruntime.transformers.float16 import convert_float_to_float16

            onnx.save(convert_float_to_float16(onnx.load(str(traced)), keep_io_types=True), str(tmp))
        else:
            shutil.move(traced, tmp)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    tmp.replace(out_file)
    log.info("exported cross-encoder -> %s (%.1f MB)", out_file, out_file.stat().st_size / 1e6)
    return out_file


def main(
    weights: Annotated[
        Path, typer.Option(help="Hugging Face model folder of the cross-encoder (config.json, weights).")
    ],
    out: Annotated[
        Path, typer.Option(help="Target model.onnx, e.g. model_repository/bge-reranker-v2-m3/1/model.onnx.")
    ],
    fp16: Annotated[
        bool, typer.Option(help="Float16 weights and activations (FP32 logits): required over 2 GiB of FP32 weights.")
    ] = False,
) -> None:
    """Export the cross-encoder in WEIGHTS to OUT (graph contract in this module's docstring)."""
    from transformers import AutoModelForSequenceClassification

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not (weights / "config.json").is_file():
        raise typer.BadParameter(f"{weights} has no config.json (expected a Hugging Face model folder)")
    model = AutoModelForSequenceClassification.from_pretrained(str(weights)).eval()
    export_cross_encoder(model, out, fp16=fp16)


if __name__ == "__main__":
    typer.run(main)
