"""infra/production/gpu_check.sh parses, and its Python part (infra/gpu_check.py) runs end to end on CPU with the
tiny shape: export with in-graph CLS pooling + L2 norm, ONNX Runtime vs PyTorch parity, timings. No server."""

from __future__ import annotations

import json
import subprocess

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "infra" / "production" / "gpu_check.sh"


def test_script_parses_and_runs_the_python_part_on_cuda() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    text = SCRIPT.read_text(encoding="utf-8")
    assert "-m infra.gpu_check --device cuda" in text and "onnxruntime-gpu" in text
    assert "timeout 420" in text, "the Python part is bounded well inside the 8 min budget"


def test_tiny_export_parity_and_timings_on_cpu() -> None:
    pytest.importorskip("torch", reason="torch is in the `stack` extra")
    pytest.importorskip("transformers")
    pytest.importorskip("onnx")
    from infra.export_onnx import OUTPUT_NAME
    from infra.gpu_check import TINY, app

    args = ["--tiny", "--device", "cpu", "--batch", "1", "--batch", "4", "--tokens", "16", "--tokens", "32"]
    result = CliRunner().invoke(app, [*args, "--repeats", "2"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    assert report["shape"] == "tiny" and report["parity_ok"] is True
    assert report["output_shape"] == [8, TINY["hidden_size"]], f"{OUTPUT_NAME} is pooled (batch, hidden)"
    assert report["max_abs_diff_cpu_vs_torch"] <= 1e-4
    assert all(abs(n - 1.0) < 1e-3 for n in report["norms"]), "L2-normalised in the graph"
    assert [(t["batch"], t["tokens"]) for t in report["timings"]] == [(1, 16), (4, 16), (1, 32), (4, 32)]
    assert all(t["median_ms"] > 0 and t["seq_per_s"] > 0 for t in report["timings"])


def test_cuda_request_without_the_provider_is_a_clear_error() -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has the CUDA provider")
    from infra.gpu_check import app

    result = CliRunner().invoke(app, ["--tiny", "--device", "cuda"])
    assert result.exit_code != 0 and "CUDAExecutionProvider" in result.output
