#!/usr/bin/env bash
# GPU check of the production embedder path on a bare GPU machine (Python 3.12, NVIDIA driver, registries
# reachable), in ~10 min: a throwaway virtual environment with torch, transformers, onnx, onnxruntime-gpu (its CUDA
# and cuDNN wheels, preloaded with onnxruntime.preload_dlls()) and tritonclient (to read the production config), then
# infra/gpu_check.py: a bge-large-shaped BERT with RANDOM weights exported with CLS pooling + L2 norm in the graph;
# FAILS unless the session really runs on CUDA (first active provider), then CUDA vs CPU parity, the TensorRT FP16
# path with the production config's profiles (cosine >= 0.999 vs FP32 CUDA; session build time), and
# latency/throughput of batches 1-64 at 128 and 512 tokens on both. The list it settles: README "Unchecked without
# a GPU".
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
"$VENV/bin/pip" install --quiet torch "transformers>=4.50" "onnx>=1.16" "onnxruntime-gpu[cuda,cudnn]>=1.21" \
  "tritonclient[grpc]" numpy typer
# The TensorRT provider dlopens libnvinfer of the TensorRT major onnxruntime-gpu was built with (10 for the ORT of the
# 26.07 Triton image); the wheel's libraries go on the loader path. Override with GPU_CHECK_TENSORRT.
"$VENV/bin/pip" install --quiet "${GPU_CHECK_TENSORRT:-tensorrt-cu12-libs>=10,<11}"
TRT_LIBS="$("$VENV/bin/python" -c 'import os, tensorrt_libs; print(os.path.dirname(tensorrt_libs.__file__))')"
export LD_LIBRARY_PATH="$TRT_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$VENV/bin/python" -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
cd "$ROOT"
PYTHONPATH="$ROOT" timeout 600 "$VENV/bin/python" -m infra.gpu_check --device cuda "$@" | tee "$OUT"
