#!/usr/bin/env bash
# Build the TensorRT-LLM engine of Llama-3.1-8B-Instruct and complete this model repository, inside the
# nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3 image on the GPU the engine will run on (engines are specific to
# the GPU model and the TensorRT-LLM version). Steps after tensorrtllm_backend docs/llama.md (r26.07).
#
#   docker run --rm --gpus all -e HF_TOKEN -v $PWD:/repo -v /srv/engines:/engines \
#     nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3 bash /repo/model_repository/llama-3.1-8b-instruct-trtllm/build.sh
#
# Writes /engines/llama-3.1-8b-instruct/{hf,ckpt,engine} and copies upstream's preprocessing/postprocessing model.py
# next to the committed config.pbtxt files.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${ENGINES_DIR:-/engines}/llama-3.1-8b-instruct"
TRTLLM_TAG="${TRTLLM_TAG:-v1.2.1}"          # TensorRT-LLM in the 26.07 trtllm image (compatibility matrix)
MAX_BATCH=64                                # = max_batch_size of the committed configs
MAX_INPUT_LEN=7168
MAX_SEQ_LEN=8192                            # = vLLM's max_model_len

hf download meta-llama/Llama-3.1-8B-Instruct --local-dir "$OUT/hf" \
  --include '*.json' '*.safetensors' 'tokenizer*'
git clone --depth 1 --branch "$TRTLLM_TAG" https://github.com/NVIDIA/TensorRT-LLM.git /tmp/TensorRT-LLM

python3 /tmp/TensorRT-LLM/examples/models/core/llama/convert_checkpoint.py \
  --model_dir "$OUT/hf" --output_dir "$OUT/ckpt" --dtype bfloat16
trtllm-build --checkpoint_dir "$OUT/ckpt" --output_dir "$OUT/engine" \
  --gpt_attention_plugin bfloat16 --gemm_plugin bfloat16 \
  --remove_input_padding enable --context_fmha enable --kv_cache_type paged \
  --use_paged_context_fmha enable \
  --max_batch_size "$MAX_BATCH" --max_input_len "$MAX_INPUT_LEN" --max_seq_len "$MAX_SEQ_LEN"

for step in preprocessing postprocessing; do
  cp /tmp/TensorRT-LLM/triton_backend/all_models/inflight_batcher_llm/$step/1/model.py "$HERE/$step/1/model.py"
done
echo "engine in $OUT/engine; model repository complete in $HERE"
