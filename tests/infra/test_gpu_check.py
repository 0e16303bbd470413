"""infra/gpu_check.py, the Python part of infra/production/gpu_check.sh, on this CPU machine: the CUDA run FAILS
here at the provider check (ONNX Runtime falls back to the CPU silently; the check reads the session's active
providers, not the available ones); the CPU smoke path runs export, parity and timings end to end; the TensorRT
options come from the production config's profiles. No server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "infra" / "production" / "gpu_check.sh"
EXPORT_DEPS = ("torch", "transformers", "onnx")


def _need_export_deps() -> None:
    for module in EXPORT_DEPS:
        pytest.importorskip(module, reason=f"{module} is in the `local` extra")


def test_gpu_check_script_is_valid_bash() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_cuda_run_fails_on_a_machine_without_a_gpu() -> None:
    """The silent CPU fallback that let the old check pass: asking for the CUDA provider here yields a session on
    the CPU provider, and the check must exit 1 saying so (never compare CPU with CPU and pass)."""
    _need_export_deps()
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has the CUDA provider: the GPU run checks it")
    from infra.gpu_check import app

    result = CliRunner().invoke(app, ["--tiny", "--device", "cuda", "--batch", "1", "--tokens", "16", "--repeats", "1"])
    assert result.exit_code == 1, result.output
    assert "first active provider is CPUExecutionProvider, not CUDAExecutionProvider" in result.output
    assert '"parity_ok"' not in result.output, "no report may claim parity after a fallback"


def test_first_provider_check_reads_the_session_not_the_available_list(tmp_path: Path) -> None:
    _need_export_deps()
    ort = pytest.importorskip("onnxruntime")
    from infra.gpu_check import CPU, GpuCheckError, export_random_bge, require_first_provider

    model = tmp_path / "tiny.onnx"
    export_random_bge(model, tiny=True)
    session = ort.InferenceSession(str(model), providers=[CPU])
    require_first_provider(session, CPU)
    with pytest.raises(GpuCheckError, match="not TensorrtExecutionProvider"):
        require_first_provider(session, "TensorrtExecutionProvider")


def test_tensorrt_options_are_the_production_profiles() -> None:
    pytest.importorskip("tritonclient.grpc")
    from infra.gpu_check import PRODUCTION_CONFIG, profile_max, tensorrt_options
    from tools.model_specs import get_spec

    options = tensorrt_options(PRODUCTION_CONFIG)
    assert options["trt_fp16_enable"] is True
    assert options["trt_engine_cache_enable"] is False, "the check builds a fresh engine"
    assert options["trt_profile_min_shapes"] == "input_ids:1x1,attention_mask:1x1"
    assert profile_max(options) == (64, get_spec("bge-large-en-v1.5").max_tokens)
    assert options["trt_max_workspace_size"] == 2 * 1024**3


def test_min_row_cosine() -> None:
    from infra.gpu_check import min_row_cosine

    a = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    assert min_row_cosine(a, a) == pytest.approx(1.0)
    assert min_row_cosine(a, np.array([[1.0, 0.0], [2.0, 0.0]], dtype=np.float32)) == pytest.approx(0.0)


def test_tiny_export_parity_and_timings_on_cpu() -> None:
    _need_export_deps()
    from infra.export_onnx import OUTPUT_NAME
    from infra.gpu_check import TINY, app

    args = ["--tiny", "--device", "cpu", "--batch", "1", "--batch", "4", "--tokens", "16", "--tokens", "32"]
    result = CliRunner().invoke(app, [*args, "--repeats", "2"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    assert report["shape"] == "tiny" and report["parity_ok"] is True and report["ok"] is True
    assert report["providers"][0] == "CPUExecutionProvider"
    assert "tensorrt" not in report, "the TensorRT path runs only with --device cuda"
    assert report["output_shape"] == [8, TINY["hidden_size"]], f"{OUTPUT_NAME} is pooled (batch, hidden)"
    assert report["max_abs_diff_cpu_vs_torch"] <= 1e-4
    assert all(abs(n - 1.0) < 1e-3 for n in report["norms"]), "L2-normalised in the graph"
    points = [(t["provider"], t["batch"], t["tokens"]) for t in report["timings"]]
    assert points == [("CPUExecutionProvider", b, s) for s in (16, 32) for b in (1, 4)]
    assert all(t["median_ms"] > 0 and t["seq_per_s"] > 0 for t in report["timings"])
