"""GPU check of the production embedder graph, without the real weights: export a bge-large-en-v1.5-shaped BERT with
RANDOM weights (same architecture: 24 layers, hidden 1024, 16 heads, intermediate 4096, vocab 30522; BAAI's
config.json) and CLS pooling + L2 normalisation inside the graph, then run it the two ways production can:

1. ONNX Runtime's CUDA execution provider in FP32, compared with the CPU provider and with PyTorch;
2. the TensorRT execution provider in FP16 with the optimisation profiles of the production config
   (`model_repository/bge-large-en-v1.5/config.pbtxt`), compared with (1) by cosine per row (>= 0.999).

Each session must run on the provider asked for: ONNX Runtime falls back to the CPU silently when a provider's
libraries do not load, and `get_available_providers()` still lists it. So the check reads the providers the
session actually holds (`InferenceSession.get_providers()`, first = the one that runs the graph) and fails unless
the first is CUDA (resp. TensorRT). The CUDA and cuDNN libraries of the `nvidia-*` wheels are preloaded first with
`onnxruntime.preload_dlls()`, as ONNX Runtime's CUDA provider docs describe (onnxruntime >= 1.21).

Run by `infra/production/gpu_check.sh` on a bare GPU machine; `--tiny` (2 layers, hidden 64) runs the same path in
seconds. On a machine without a GPU, `--device cuda` fails at the provider check
(tests/infra/test_gpu_check.py shows it); `--device cpu` runs the CPU-only smoke path. Prints one JSON object:
providers, parity, TensorRT agreement and session build time, and per (provider, batch, tokens) the median latency in
ms and the throughput in sequences/s.
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
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
CPU = "CPUExecutionProvider"
PRODUCTION_CONFIG = Path(__file__).resolve().parent.parent / "model_repository" / "bge-large-en-v1.5" / "config.pbtxt"
MIN_COSINE_FP16 = 0.999
"""Least cosine between a TensorRT FP16 embedding and the FP32 CUDA one of the same text (issue 21's bound)."""

app = typer.Typer(add_completion=False)


class GpuCheckError(RuntimeError):
    """A check that must hold on a GPU host did not: the message says which and what was found."""


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


def preload_cuda_libraries(ort: Any) -> None:
    """Load the CUDA and cuDNN shared libraries before any session (`onnxruntime.preload_dlls()`: from the
    `nvidia-*` wheels, else the default library path; ONNX Runtime's CUDA provider docs, "Preload DLLs").

    Raises:
        GpuCheckError: this onnxruntime has no `preload_dlls` (older than 1.21).
    """
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        raise GpuCheckError(f"onnxruntime {ort.__version__} has no preload_dlls(); install onnxruntime-gpu >= 1.21")
    preload()


def require_first_provider(session: Any, expected: str) -> None:
    """Fail unless `expected` is the session's first active provider (the one that runs the graph).

    Raises:
        GpuCheckError: ONNX Runtime fell back, e.g. to `CPUExecutionProvider` because the CUDA libraries did not
            load; the message names the providers the session holds.
    """
    active = list(session.get_providers())
    if not active or active[0] != expected:
        raise GpuCheckError(
            f"the session's first active provider is {active[0] if active else None}, not {expected} "
            f"(active: {active}): ONNX Runtime fell back; its log above says which library failed to load"
        )


def tensorrt_options(config_file: Path) -> dict[str, Any]:
    """The TensorRT provider options that Triton's ONNX Runtime backend derives from `config_file`'s
    `gpu_execution_accelerator { name: "tensorrt" ... }`: FP16 (`precision_mode`), the workspace, and the explicit
    optimisation profiles `trt_profile_{min,opt,max}_shapes` (`"input_ids:1x1,attention_mask:1x1"`, batch x tokens).
    The engine cache is off: the check builds a fresh engine.

    Raises:
        GpuCheckError: the config has no TensorRT accelerator or no explicit profile.
    """
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(config_file.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())
    accelerators = [
        a for a in config.optimization.execution_accelerators.gpu_execution_accelerator if a.name == "tensorrt"
    ]
    if not accelerators:
        raise GpuCheckError(f"{config_file} has no tensorrt gpu_execution_accelerator")
    params = dict(accelerators[0].parameters)
    missing = [
        k for k in ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes") if k not in params
    ]
    if missing:
        raise GpuCheckError(f"{config_file} sets no {missing}: the TensorRT engine would follow the first request")
    options: dict[str, Any] = {
        k: params[k] for k in ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")
    }
    options["trt_fp16_enable"] = params.get("precision_mode") == "FP16"
    if "max_workspace_size_bytes" in params:
        options["trt_max_workspace_size"] = int(params["max_workspace_size_bytes"])
    options["trt_engine_cache_enable"] = False
    return options


def profile_max(options: dict[str, Any]) -> tuple[int, int]:
    """(batch, tokens) of `input_ids` in the profile's `trt_profile_max_shapes`."""
    shapes = dict(item.split(":") for item in str(options["trt_profile_max_shapes"]).split(","))
    batch, tokens = (int(n) for n in shapes["input_ids"].split("x"))
    return batch, tokens


def min_row_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Least cosine similarity between matching rows of `a` and `b`, float32 `(batch, dim)` each."""
    num = np.sum(a * b, axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.min(num / np.maximum(den, 1e-12)))


def check_tensorrt(ort: Any, model: Path, cuda: Any, config_file: Path, repeats: int) -> dict[str, Any]:
    """Build the TensorRT FP16 session with the production profiles and compare it with the FP32 CUDA session
    `cuda` on a batch of 8 x 128 tokens and on the profile's largest shape. Returns the report's `tensorrt` part.

    Raises:
        GpuCheckError: the session does not run on TensorRT.
    """
    options = tensorrt_options(config_file)
    start = time.perf_counter()
    session = ort.InferenceSession(str(model), providers=[(TENSORRT, options), CUDA])
    build_s = time.perf_counter() - start
    require_first_provider(session, TENSORRT)
    max_batch, max_tokens = profile_max(options)
    probes = [make_inputs(8, 128, seed=2), make_inputs(max_batch, max_tokens, seed=3)]
    start = time.perf_counter()
    session.run([OUTPUT_NAME], probes[0])
    first_run_ms = (time.perf_counter() - start) * 1000.0
    cosines = [min_row_cosine(session.run([OUTPUT_NAME], p)[0], cuda.run([OUTPUT_NAME], p)[0]) for p in probes]
    return {
        "providers": session.get_providers(),
        "options": options,
        # With explicit profiles the engine is built while the session is created, not at the first request.
        "session_create_s": round(build_s, 2),
        "first_run_ms": round(first_run_ms, 2),
        "min_cosine_vs_cuda_fp32": min(cosines),
        "session": session,
    }


@app.command()
def main(
    tiny: Annotated[bool, typer.Option(help="2 layers, hidden 64: the fast path.")] = False,
    device: Annotated[
        str, typer.Option(help="`cuda` (CUDA vs CPU provider, then TensorRT) or `cpu` (CPU only).")
    ] = "cuda",
    tensorrt: Annotated[bool, typer.Option(help="Also check the TensorRT FP16 path (with --device cuda).")] = True,
    config: Annotated[Path, typer.Option(help="Triton config whose TensorRT profiles to use.")] = PRODUCTION_CONFIG,
    batches: Annotated[list[int], typer.Option("--batch", help="Batch sizes to time.")] = [1, 8, 16, 32, 64],  # noqa: B006
    tokens: Annotated[list[int], typer.Option("--tokens", help="Sequence lengths to time.")] = [128, 512],  # noqa: B006
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs per point.")] = 10,
    atol: Annotated[float, typer.Option(help="Largest allowed |GPU - CPU| per embedding component.")] = 2e-3,
) -> None:
    """Export, provider and parity checks, TensorRT FP16 agreement, timing; exit code 1 when any check fails."""
    import onnxruntime as ort

    if device not in ("cuda", "cpu"):
        raise typer.BadParameter(f"{device!r}; expected cuda or cpu", param_hint="--device")
    expected = CUDA if device == "cuda" else CPU
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.onnx"
        wrapper = export_random_bge(model, tiny)
        try:
            if device == "cuda":
                preload_cuda_libraries(ort)
            cpu = ort.InferenceSession(str(model), providers=[CPU])
            target = ort.InferenceSession(str(model), providers=[expected, CPU] if device == "cuda" else [CPU])
            require_first_provider(target, expected)
            trt = check_tensorrt(ort, model, target, config, repeats) if device == "cuda" and tensorrt else None
        except GpuCheckError as exc:
            typer.echo(f"gpu_check FAILED: {exc}", err=True)
            raise typer.Exit(1) from exc
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
        checks = {
            "parity_vs_cpu": report["max_abs_diff_vs_cpu"] <= atol,
            "parity_cpu_vs_torch": report["max_abs_diff_cpu_vs_torch"] <= 1e-4,
            "unit_norms": bool(np.allclose(report["norms"], 1.0, atol=1e-3)),
        }
        sessions = {expected: target}
        if trt is not None:
            sessions[TENSORRT] = trt.pop("session")
            report["tensorrt"] = trt
            checks["tensorrt_fp16_cosine"] = trt["min_cosine_vs_cuda_fp32"] >= MIN_COSINE_FP16
        report["parity_ok"] = checks["parity_vs_cpu"] and checks["parity_cpu_vs_torch"] and checks["unit_norms"]
        for provider, session in sessions.items():
            for seq in tokens:
                for batch in batches:
                    ms = time_session(session, make_inputs(batch, seq), repeats)
                    report["timings"].append(
                        {
                            "provider": provider,
                            "batch": batch,
                            "tokens": seq,
                            "median_ms": round(ms, 3),
                            "seq_per_s": round(batch / ms * 1e3, 1),
                        }
                    )
    report["checks"] = checks
    report["ok"] = all(checks.values())
    typer.echo(json.dumps(report, indent=2))
    if not report["ok"]:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
