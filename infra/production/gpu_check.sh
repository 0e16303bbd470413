#!/usr/bin/env bash
# GPU check of the production embedder path on a bare GPU machine (Python 3.12, NVIDIA driver, registries
# reachable), in < 8 min: a throwaway virtual environment with torch, transformers, onnx and onnxruntime-gpu, then
# infra/gpu_check.py: a bge-large-shaped BERT with RANDOM weights exported with CLS pooling + L2 norm in the graph,
# ONNX Runtime CUDA vs CPU parity, and latency/throughput of batches 1-64 at 128 and 512 tokens.
#   bash infra/production/gpu_check.sh [--out gpu_check.json] [extra infra/gpu_check.py options]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VENV="${GPU_CHECK_VENV:-/tmp/gpu-check-venv}"
OUT="gpu_check.json"
if [[ "${1:-}" == "--out" ]]; then OUT="$2"; shift 2; fi

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# torch's Linux wheels on PyPI carry their CUDA runtime; onnxruntime-gpu brings the CUDA execution provider.
"$VENV/bin/pip" install --quiet torch "transformers>=4.50" "onnx>=1.16" onnxruntime-gpu numpy typer
"$VENV/bin/python" -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
cd "$ROOT"
PYTHONPATH="$ROOT" timeout 420 "$VENV/bin/python" -m infra.gpu_check --device cuda "$@" | tee "$OUT"
