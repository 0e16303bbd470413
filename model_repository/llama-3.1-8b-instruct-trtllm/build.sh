#!/usr/bin/env bash
# Build the TensorRT-LLM engine of Llama-3.1-8B-Instruct and generate its Triton model repository, inside the
# nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3 image on the GPU model the engine will run on (engines are
# specific to the GPU model and the TensorRT-LLM version). Steps of tensorrtllm_backend docs/llama.md (r26.07).
#
#   docker run --rm --gpus all -e HF_TOKEN -v $PWD:/repo -v /srv/engines:/engines \
#     nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3 bash /repo/model_repository/llama-3.1-8b-instruct-trtllm/build.sh
#
# Emits ONLY $OUT = /engines/llama-3.1-8b-instruct/{engine, tokenizer, model_repository} (~16.1 GB, the bf16 engine);
# the Hugging Face download (~16 GB) and the converted checkpoint (~16 GB) live in a scratch folder that is deleted
# on exit. model_repository/ holds the four models of upstream's inflight_batcher_llm (preprocessing, tensorrt_llm,
# postprocessing, and the ensemble renamed llama-3.1-8b-instruct, the name LLM_MODEL serves), their configs filled
# from upstream's templates with upstream's tools/fill_template.py, and upstream's model.py files: templates, tool
# and model.py all of ONE commit, TRTLLM_COMMIT, the TensorRT-LLM submodule of tensorrtllm_backend r26.07. Before
# anything is written, infra/trtllm_check.py checks each Python model's initialize() against its filled config, the
# ensemble's wiring and the OpenAI frontend's tensors, and that initialize() reads what initialize_requirements.json
# recorded (a changed upstream is reviewed, not shipped blind).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO_ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${ENGINES_DIR:-/engines}/llama-3.1-8b-instruct"
# tensorrtllm_backend r26.07: .gitmodules -> triton-inference-server/TensorRT-LLM, submodule tensorrt_llm at this commit.
TRTLLM_URL="https://github.com/triton-inference-server/TensorRT-LLM.git"
TRTLLM_COMMIT="ca88df0a400515b8206a19eb30cd047eb7661035"
MODEL=meta-llama/Llama-3.1-8B-Instruct
MAX_BATCH=64                                # = the HPA's and the frontend's batch assumptions
MAX_INPUT_LEN=7168
MAX_SEQ_LEN=8192                            # = vLLM's max_model_len
ENSEMBLE=llama-3.1-8b-instruct              # = LLM_MODEL

SCRATCH="$(mktemp -d "${SCRATCH_DIR:-/tmp}/trtllm-build.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
SRC="$SCRATCH/TensorRT-LLM"

git init -q "$SRC"
git -C "$SRC" fetch -q --depth 1 "$TRTLLM_URL" "$TRTLLM_COMMIT"
git -C "$SRC" checkout -q FETCH_HEAD
# The models' folder: all_models/ in the NVIDIA tree read here; docs/llama.md (r26.07) names ci/all_models/.
MODELS_SRC="$SRC/triton_backend/all_models/inflight_batcher_llm"
[ -d "$MODELS_SRC" ] || MODELS_SRC="$SRC/triton_backend/ci/all_models/inflight_batcher_llm"
FILL="python3 $SRC/triton_backend/tools/fill_template.py -i"

# 1. The model repository, generated and checked first (minutes before a 30 min engine build).
REPO="$SCRATCH/model_repository"
mkdir -p "$REPO"
for step in preprocessing tensorrt_llm postprocessing; do cp -r "$MODELS_SRC/$step" "$REPO/$step"; done
cp -r "$MODELS_SRC/ensemble" "$REPO/$ENSEMBLE"
sed -i "s/^name: \"ensemble\"/name: \"$ENSEMBLE\"/" "$REPO/$ENSEMBLE/config.pbtxt"
ENGINE_DIR="$OUT/engine"
TOKENIZER_DIR="$OUT/tokenizer"
# Placeholders left unfilled (multimodal_model_path, max_num_images, hf_model_path, max_tokens_in_paged_kv_cache,
# max_attention_window_size) are upstream's "unset": model.py and the backend read a literal ${...} as not given.
$FILL "$REPO/preprocessing/config.pbtxt" \
  "tokenizer_dir:$TOKENIZER_DIR,triton_max_batch_size:$MAX_BATCH,preprocessing_instance_count:4,engine_dir:$ENGINE_DIR,add_special_tokens:false,max_queue_delay_microseconds:0,max_queue_size:0"
$FILL "$REPO/postprocessing/config.pbtxt" \
  "tokenizer_dir:$TOKENIZER_DIR,triton_max_batch_size:$MAX_BATCH,postprocessing_instance_count:4,skip_special_tokens:true"
$FILL "$REPO/$ENSEMBLE/config.pbtxt" "triton_max_batch_size:$MAX_BATCH,logits_datatype:TYPE_FP32"
# Decoupled: the OpenAI frontend streams; paged KV cache reuse for the shared system prompt and tool definitions.
$FILL "$REPO/tensorrt_llm/config.pbtxt" \
  "triton_backend:tensorrtllm,triton_max_batch_size:$MAX_BATCH,decoupled_mode:true,max_beam_width:1,engine_dir:$ENGINE_DIR,kv_cache_free_gpu_mem_fraction:0.85,exclude_input_in_output:true,enable_kv_cache_reuse:true,batching_strategy:inflight_fused_batching,max_queue_delay_microseconds:0,encoder_input_features_data_type:TYPE_FP16,logits_datatype:TYPE_FP32,prompt_embedding_table_data_type:TYPE_FP16"
python3 -c "import tritonclient.grpc" 2>/dev/null || pip install --quiet "tritonclient[grpc]"
PYTHONPATH="$REPO_ROOT" python3 -m infra.trtllm_check "$REPO" --ensemble "$ENSEMBLE" \
  --requirements "$HERE/initialize_requirements.json"

# 2. Engine and tokenizer (the checkpoint conversion reads the weights from scratch).
hf download "$MODEL" --local-dir "$SCRATCH/hf" --include '*.json' '*.safetensors' 'tokenizer*'
python3 "$SRC/examples/models/core/llama/convert_checkpoint.py" \
  --model_dir "$SCRATCH/hf" --output_dir "$SCRATCH/ckpt" --dtype bfloat16
rm -rf "$OUT.partial" && mkdir -p "$OUT.partial/tokenizer"
trtllm-build --checkpoint_dir "$SCRATCH/ckpt" --output_dir "$OUT.partial/engine" \
  --gpt_attention_plugin bfloat16 --gemm_plugin bfloat16 \
  --remove_input_padding enable --context_fmha enable --kv_cache_type paged \
  --use_paged_context_fmha enable \
  --max_batch_size "$MAX_BATCH" --max_input_len "$MAX_INPUT_LEN" --max_seq_len "$MAX_SEQ_LEN"
cp "$SCRATCH"/hf/tokenizer* "$SCRATCH/hf/config.json" "$SCRATCH/hf/generation_config.json" "$OUT.partial/tokenizer/"
cp -r "$REPO" "$OUT.partial/model_repository"

# 3. Swap in atomically: a reader never sees half a build.
rm -rf "$OUT.old" && { [ ! -e "$OUT" ] || mv "$OUT" "$OUT.old"; } && mv "$OUT.partial" "$OUT" && rm -rf "$OUT.old"
echo "emitted $(ls "$OUT" | tr '\n' ' ')in $OUT ($(du -sh "$OUT" | cut -f1)); upload it (README \"TensorRT-LLM\")"
