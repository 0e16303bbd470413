"""Export a Hugging Face text encoder to ONNX for Triton: `model_repository/<model>/1/model.onnx`.

Graph contract (matches `config.pbtxt`): inputs `input_ids` and `attention_mask`, INT64 `(batch, seq)`; output
`sentence_embedding`, FP32 `(batch, dim)`: the pooled, L2-normalised sentence embedding (batch and sequence axes
dynamic). Pooling is the model's (`tools.model_specs`): masked mean over tokens for MiniLM (sentence-transformers'
`Pooling(pooling_mode_mean_tokens=True)`), the first token for bge (`cls`, FlagEmbedding), each followed by L2
normalisation, so the server returns `dim` floats per text instead of `seq x dim` token states. `tools.pooling` is
the numpy reference of the same computation (tests compare the two).

Uses the TorchScript exporter (`torch.onnx.export(..., dynamo=False, opset_version=17)`); needs torch and
transformers (the `stack` extra). Usage: `python -m infra.export_onnx [MODEL_NAME] [--weights DIR] [--out FILE]`;
`--check` only reports (exit 1) whether the target is missing or stale, `--if-stale` exports only then.

Quantised variants (`quantization="int8-dynamic"` in `tools.model_specs`, e.g. `all-minilm-l6-v2-int8`) are made
from their base model's pooled float graph (exported first if missing or stale) by ONNX Runtime dynamic
quantisation (`onnxruntime.quantization.quantize_dynamic`, int8 weights per output channel, activations quantised
at run time): `python -m infra.export_onnx all-minilm-l6-v2-int8`. Per-channel weights matter here: per-tensor int8
weights drop the mean cosine to the float embeddings of SciFact abstracts to ~0.93, per-channel keeps it at ~0.99
(measured on 64 abstracts, 2026-11-29).

Every exported file carries `EXPORT_VERSION` in its ONNX `metadata_props` (key `EXPORT_VERSION_KEY`); a file with
another version or another output is stale (`is_stale`), e.g. a graph from before pooling moved into it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from tools.model_specs import EMBEDDING_OUTPUT, EmbeddingModelSpec, Pooling, get_spec

log = logging.getLogger(__name__)

OPSET = 17
OUTPUT_NAME = EMBEDDING_OUTPUT
"""The graph's only output: `(batch, dim)` float32, L2-normalised rows."""
EXPORT_VERSION = "2"
"""Version of the graph contract: 1 = `last_hidden_state` (batch, seq, dim); 2 = pooled `sentence_embedding`."""
EXPORT_VERSION_KEY = "triton_rag.export_version"


def pooled_encoder(encoder: Any, pooling: Pooling) -> Any:
    """`encoder` (a Hugging Face `AutoModel`) wrapped as a `torch.nn.Module` in eval mode that maps `input_ids`,
    `attention_mask` int64 `(batch, seq)` to the pooled, L2-normalised sentence embedding `(batch, hidden)` float32;
    the same arithmetic as `tools.pooling.pool_and_normalize`.

    Args:
        pooling: `mean` (attention-mask-weighted mean of the token states) or `cls` (the first token's state).

    Raises:
        ValueError: unknown `pooling`.
    """
    import torch

    if pooling not in ("mean", "cls"):
        raise ValueError(f"unknown pooling {pooling!r}; expected 'mean' or 'cls'")

    class PooledEncoder(torch.nn.Module):
        """Encoder -> pooling -> L2 normalisation."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.encoder = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            states: torch.Tensor = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            if pooling == "mean":
                mask = attention_mask.unsqueeze(-1).to(states.dtype)
                pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            else:
                pooled = states[:, 0]
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1, eps=1e-12)

    return PooledEncoder(encoder).eval()


def export_graph(wrapper: Any, out_file: Path) -> None:
    """Write `wrapper` (from `pooled_encoder`) to `out_file` as ONNX with the graph contract above: TorchScript
    exporter, opset `OPSET`, batch and sequence axes dynamic."""
    import torch

    dummy = torch.ones((2, 16), dtype=torch.int64)
    with torch.no_grad():
        torch.onnx.export(
            wrapper,
            (dummy, dummy),
            str(out_file),
            input_names=["input_ids", "attention_mask"],
            output_names=[OUTPUT_NAME],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                OUTPUT_NAME: {0: "batch"},
            },
            opset_version=OPSET,
            dynamo=False,
        )


def export_onnx(weights_dir: Path, out_file: Path, pooling: Pooling) -> Path:
    """Export the encoder in `weights_dir`, with pooling and L2 norm inside the graph, to `out_file` (atomically).

    Args:
        weights_dir: a Hugging Face model folder (`config.json`, weights).
        out_file: target `model.onnx` path; its parent is created.
        pooling: `mean` (attention-mask-weighted mean of the token states) or `cls` (the first token's state).

    Returns:
        `out_file`, whose graph maps `input_ids`, `attention_mask` INT64 `(batch, seq)` to `sentence_embedding`
        FP32 `(batch, dim)` with unit L2 norm per row.

    Raises:
        FileNotFoundError: `weights_dir` has no `config.json`.
        ValueError: unknown `pooling`.
    """
    from transformers import AutoModel

    if not (weights_dir / "config.json").is_file():
        raise FileNotFoundError(f"weights_dir {weights_dir} has no config.json (expected a Hugging Face model dir)")
    model = AutoModel.from_pretrained(str(weights_dir))
    wrapper = pooled_encoder(model.eval(), pooling)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_suffix(".onnx.tmp")
    export_graph(wrapper, tmp)
    _finish(tmp, dim=int(model.config.hidden_size))
    tmp.replace(out_file)
    log.info("exported %s (%s pooling) -> %s (%.1f MB)", weights_dir, pooling, out_file, out_file.stat().st_size / 1e6)
    return out_file


def quantize_int8(float_file: Path, out_file: Path) -> Path:
    """Dynamic int8 quantisation of the pooled float ONNX graph `float_file` into `out_file` (atomically).

    Weights of MatMul/Gather become int8 per output channel (`per_channel=True`, `QuantType.QInt8`); activations
    are quantised per call (ONNX Runtime "dynamic quantization", onnxruntime.ai/docs/performance/model-optimizations/
    quantization.html). Inputs and the pooled output keep their int64/float types, so the same `config.pbtxt`
    contract holds.

    Raises:
        FileNotFoundError: `float_file` does not exist.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if not float_file.is_file():
        raise FileNotFoundError(f"float ONNX graph {float_file} not found; export the base model first")
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_suffix(".onnx.tmp")
    quantize_dynamic(float_file, tmp, per_channel=True, weight_type=QuantType.QInt8)
    _finish(tmp)
    tmp.replace(out_file)
    log.info("quantised %s -> %s (%.1f MB)", float_file, out_file, out_file.stat().st_size / 1e6)
    return out_file


def _finish(model_file: Path, dim: int | None = None) -> None:
    """Record `EXPORT_VERSION` in the file's ONNX metadata (`metadata_props`) and, given `dim`, declare the output's
    width: the tracer leaves it symbolic after the normalisation, while `config.pbtxt` declares `[dim]`."""
    import onnx

    model = onnx.load(str(model_file))
    if dim is not None:
        (output,) = model.graph.output
        width = output.type.tensor_type.shape.dim[1]
        width.Clear()
        width.dim_value = dim
    props = {p.key: p.value for p in model.metadata_props}
    props[EXPORT_VERSION_KEY] = EXPORT_VERSION
    onnx.helper.set_model_props(model, props)
    onnx.save(model, str(model_file))


def is_stale(model_file: Path) -> str | None:
    """Why `model_file` must be (re-)exported, or None when it is current.

    Reads only the graph's outputs and metadata (`onnx.load(..., load_external_data=False)`; about a second for
    the 90 MB MiniLM file). Current means: the only output is `OUTPUT_NAME` of rank 2 and the file's export
    version is `EXPORT_VERSION`.
    """
    import onnx

    if not model_file.is_file():
        return f"{model_file} is missing"
    try:
        model = onnx.load(str(model_file), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is re-exported
        return f"{model_file} is unreadable ({exc})"
    outputs = [(o.name, len(o.type.tensor_type.shape.dim)) for o in model.graph.output]
    if outputs != [(OUTPUT_NAME, 2)]:
        return f"{model_file} outputs {outputs}, expected [({OUTPUT_NAME!r}, rank 2)]"
    version = {p.key: p.value for p in model.metadata_props}.get(EXPORT_VERSION_KEY)
    if version != EXPORT_VERSION:
        return f"{model_file} has export version {version}, expected {EXPORT_VERSION}"
    return None


def export_model(spec: EmbeddingModelSpec, repository: Path, weights: Path | None, out: Path | None) -> Path:
    """Export (or quantise) `spec`'s graph into `out` (default `repository/<model>/1/model.onnx`).

    A quantised spec re-exports its base model first when that file is missing or stale.

    Raises:
        ValueError: a quantised spec names no base model. LookupError: no `weights` and no weights package.
    """
    target = out or repository / spec.name / "1" / "model.onnx"
    if spec.quantization == "int8-dynamic":
        if spec.base_model is None:
            raise ValueError(f"model {spec.name!r} is quantised but names no base_model")
        base = get_spec(spec.base_model)
        base_file = repository / base.name / "1" / "model.onnx"
        if is_stale(base_file):
            export_onnx(weights or base.weights_dir(), base_file, base.pooling)
        return quantize_int8(base_file, target)
    return export_onnx(weights or spec.weights_dir(), target, spec.pooling)


def main(
    model: Annotated[str, typer.Argument(help="Model name in tools.model_specs")] = "all-minilm-l6-v2",
    weights: Annotated[Path | None, typer.Option(help="Hugging Face model dir; default: the model's package")] = None,
    out: Annotated[Path | None, typer.Option(help="Output file; default <repository>/<model>/1/model.onnx")] = None,
    repository: Annotated[
        Path, typer.Option(envvar="MODEL_REPOSITORY", help="Triton model repository to write into.")
    ] = Path("model_repository"),
    check: Annotated[bool, typer.Option("--check", help="Only report: exit 1 when missing or stale")] = False,
    if_stale: Annotated[bool, typer.Option("--if-stale", help="Export only when missing or stale")] = False,
) -> None:
    """Export MODEL to ONNX (pooled, L2-normalised `sentence_embedding` output)."""
    spec = get_spec(model)
    target = out or repository / spec.name / "1" / "model.onnx"
    reason = is_stale(target)
    if spec.base_model is not None and reason is None:
        base_file = repository / spec.base_model / "1" / "model.onnx"
        base_reason = is_stale(base_file)
        if base_reason is not None or base_file.stat().st_mtime > target.stat().st_mtime:
            reason = base_reason or f"{target} is older than its base graph {base_file}"
    if check or if_stale:
        typer.echo(reason or f"{target} is current (export version {EXPORT_VERSION})")
        if check:
            raise typer.Exit(0 if reason is None else 1)
        if reason is None:
            return
    try:
        export_model(spec, repository, weights, out)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(str(target))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    typer.run(main)
