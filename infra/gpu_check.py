"""GPU check of the production embedder graph, without the real weights: export a bge-large-en-v1.5-shaped BERT with
RANDOM weights (same architecture: 24 layers, hidden 1024, 16 heads, intermediate 4096, vocab 30522; BAAI's
config.json) and CLS pooling + L2 normalisation inside the graph, run it with ONNX Runtime on the CUDA execution
provider, check the pooled output against the CPU provider, and time batches of 1-64 at 128 and 512 tokens.

Run by `infra/production/gpu_check.sh` on a bare GPU machine; `--tiny` (2 layers, hidden 64) runs the same path on
CPU in seconds (tests/test_gpu_check.py). Prints one JSON object: parity, and per (batch, tokens) the median latency
in ms and the throughput in sequences/s.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from infra.export_onnx import OUTPUT_NAME, export_graph, pooled_encoder  # the production export's graph

BGE_LARGE = {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096}
TINY = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128}
VOCAB_SIZE = 30522
MAX_POSITIONS = 512

app = typer.Typer(add_completion=False)


def export_random_bge(out_file: Path, tiny: bool, seed: int = 0) -> Any:
    """Export a randomly initialised BERT of bge-large's (or the tiny) shape with in-graph pooling to ONNX (opset
    17, batch and sequence dynamic). Inputs `input_ids`, `attention_mask` int64 `(batch, seq)`; output
    `sentence_embedding` float32 `(batch, hidden)`. Returns the PyTorch wrapper (the eager reference)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    shape = TINY if tiny else BGE_LARGE
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=MAX_POSITIONS,
        num_hidden_layers=shape["num_hidden_layers"],
        hidden_size=shape["hidden_size"],
        num_attention_heads=shape["num_attention_heads"],
        intermediate_size=shape["intermediate_size"],
    )
    model_class: Any = BertModel  # transformers' model classes are untyped
    wrapper = pooled_encoder(model_class(config, add_pooling_layer=False).eval(), "cls")
    export_graph(wrapper, out_file)
    return wrapper


def make_inputs(batch: int, tokens: int, seed: int = 1) -> dict[str, np.ndarray]:
    """Random token ids `(batch, tokens)` int64 with [CLS]=101 first and a right-padded mask (lengths tokens/2..)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, VOCAB_SIZE, size=(batch, tokens), dtype=np.int64)
    ids[:, 0] = 101
    lengths = rng.integers(max(1, tokens // 2), tokens + 1, size=batch)
    mask = (np.arange(tokens)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": ids * mask, "attention_mask": mask}


def time_session(session: Any, inputs: dict[str, np.ndarray], repeats: int) -> float:
    """Median wall time of `session.run` in ms over `repeats` runs, after two warm-up runs."""
    for _ in range(2):
        session.run([OUTPUT_NAME], inputs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run([OUTPUT_NAME], inputs)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


@app.command()
def main(
    tiny: Annotated[bool, typer.Option(help="2 layers, hidden 64: the CPU smoke path.")] = False,
    device: Annotated[str, typer.Option(help="`cuda` (CUDA provider vs CPU provider) or `cpu` (CPU only).")] = "cuda",
    batches: Annotated[list[int], typer.Option("--batch", help="Batch sizes to time.")] = [1, 8, 16, 32, 64],  # noqa: B006
    tokens: Annotated[list[int], typer.Option("--tokens", help="Sequence lengths to time.")] = [128, 512],  # noqa: B006
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs per point.")] = 10,
    atol: Annotated[float, typer.Option(help="Largest allowed |GPU - CPU| per embedding component.")] = 2e-3,
) -> None:
    """Export, parity check and timing; exit code 1 when parity fails."""
    import onnxruntime as ort

    providers = ["CPUExecutionProvider"]
    if device == "cuda":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise typer.BadParameter(
                f"no CUDAExecutionProvider in onnxruntime {ort.__version__}", param_hint="--device"
            )
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.onnx"
        wrapper = export_random_bge(model, tiny)
        cpu = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        target = ort.InferenceSession(str(model), providers=providers)
        probe = make_inputs(8, 128)
        reference = cpu.run([OUTPUT_NAME], probe)[0]
        got = target.run([OUTPUT_NAME], probe)[0]
        import torch

        with torch.no_grad():
            eager = wrapper(*(torch.from_numpy(probe[k]) for k in ("input_ids", "attention_mask"))).numpy()
        report: dict[str, Any] = {
            "shape": "tiny" if tiny else "bge-large",
            "providers": target.get_providers(),
            "onnxruntime": ort.__version__,
            "output_shape": list(got.shape),
            "max_abs_diff_vs_cpu": float(np.max(np.abs(got - reference))),
            # Padded rows of another shape than the export's dummy: catches a trace specialised on the dummy.
            "max_abs_diff_cpu_vs_torch": float(np.max(np.abs(reference - eager))),
            "norms": [float(n) for n in np.linalg.norm(got, axis=1)],
            "timings": [],
        }
        report["parity_ok"] = bool(
            report["max_abs_diff_vs_cpu"] <= atol
            and report["max_abs_diff_cpu_vs_torch"] <= 1e-4
            and np.allclose(report["norms"], 1.0, atol=1e-3)
        )
        for seq in tokens:
            for batch in batches:
                ms = time_session(target, make_inputs(batch, seq), repeats)
                report["timings"].append(
                    {"batch": batch, "tokens": seq, "median_ms": round(ms, 3), "seq_per_s": round(batch / ms * 1e3, 1)}
                )
    typer.echo(json.dumps(report, indent=2))
    if not report["parity_ok"]:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
