"""infra/trtllm_check.py: a Python model's initialize() requirements read from its source and checked against its
config, the ensemble's wiring and the OpenAI frontend's tensors. The recorded upstream requirements
(model_repository/llama-3.1-8b-instruct-trtllm/initialize_requirements.json) flag the hand-reduced preprocessing
config that could not load (issue 21: KeyError on multimodal_model_path, undeclared EMBEDDING_BIAS_* inputs and
PIXEL_VALUES/IMAGE_SIZES outputs). No server."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.conftest import REPO_ROOT

pytest.importorskip("tritonclient.grpc")

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from infra.trtllm_check import (
    FRONTEND_READS,
    FRONTEND_SENDS,
    Requirements,
    check_ensemble,
    check_model,
    initialize_requirements,
    main,
)

TRTLLM_DIR = REPO_ROOT / "model_repository" / "llama-3.1-8b-instruct-trtllm"
RECORDED = TRTLLM_DIR / "initialize_requirements.json"

# The access patterns of upstream's preprocessing initialize() (written for this test, not upstream's code).
MODEL_PY = """
import json
class TritonPythonModel:
    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        tokenizer = model_config["parameters"]["tokenizer_dir"]["string_value"]
        special = model_config["parameters"].get("add_special_tokens")
        path = model_config["parameters"]["multimodal_model_path"]["string_value"]
        names = ["INPUT_ID", "PIXEL_VALUES"]
        for name in names:
            pb_utils.get_output_config_by_name(model_config, name)["data_type"]
        for name in ["EMBEDDING_BIAS_WORDS"]:
            pb_utils.get_input_config_by_name(model_config, name)["data_type"]
        pb_utils.get_output_config_by_name(model_config, "OUT_END_ID")

    def execute(self, requests):
        return model_config["parameters"]["not_in_initialize"]
"""

# The preprocessing config that shipped before (hand-reduced; parameters and tensors as it declared them).
OLD_PREPROCESSING = """
name: "preprocessing"
backend: "python"
max_batch_size: 64
input [
  { name: "QUERY" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "REQUEST_OUTPUT_LEN" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "BAD_WORDS_DICT" data_type: TYPE_STRING dims: [ -1 ] optional: true },
  { name: "STOP_WORDS_DICT" data_type: TYPE_STRING dims: [ -1 ] optional: true },
  { name: "END_ID" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
  { name: "PAD_ID" data_type: TYPE_INT32 dims: [ 1 ] optional: true }
]
output [
  { name: "INPUT_ID" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "REQUEST_INPUT_LEN" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "DECODER_INPUT_ID" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "REQUEST_DECODER_INPUT_LEN" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "BAD_WORDS_IDS" data_type: TYPE_INT32 dims: [ 2, -1 ] },
  { name: "STOP_WORDS_IDS" data_type: TYPE_INT32 dims: [ 2, -1 ] },
  { name: "EMBEDDING_BIAS" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "REQUEST_OUTPUT_LEN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "OUT_END_ID" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "OUT_PAD_ID" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "OUT_PROMPT_TABLE_EXTRA_IDS" data_type: TYPE_UINT64 dims: [ -1 ] }
]
parameters { key: "tokenizer_dir" value: { string_value: "/engines/llama-3.1-8b-instruct/hf" } }
parameters { key: "add_special_tokens" value: { string_value: "false" } }
instance_group [ { count: 4 kind: KIND_CPU } ]
"""


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def recorded() -> dict[str, Requirements]:
    data = json.loads(RECORDED.read_text(encoding="utf-8"))
    return {name: Requirements.from_json(req) for name, req in data["models"].items()}


def test_initialize_requirements_are_read_from_the_source() -> None:
    req = initialize_requirements(MODEL_PY)
    assert req.parameters == {"tokenizer_dir", "multimodal_model_path"}, "execute() reads do not count"
    assert req.optional_parameters == {"add_special_tokens"}
    assert req.inputs == {"EMBEDDING_BIAS_WORDS"}
    assert req.outputs == {"INPUT_ID", "PIXEL_VALUES", "OUT_END_ID"}
    with pytest.raises(ValueError, match="no initialize"):
        initialize_requirements("class TritonPythonModel:\n    def execute(self, r):\n        return r\n")


def test_recorded_requirements_flag_the_config_that_could_not_load() -> None:
    problems = check_model(parse(OLD_PREPROCESSING), recorded()["preprocessing"])
    text = "\n".join(problems)
    for missing in ("'multimodal_model_path'", "'EMBEDDING_BIAS_WORDS'", "'EMBEDDING_BIAS_WEIGHTS'"):
        assert missing in text, missing
    for missing in ("'PIXEL_VALUES'", "'IMAGE_SIZES'"):
        assert f"output {missing}" in text, missing
    assert "KeyError" in text


def test_a_config_with_every_requirement_passes() -> None:
    req = recorded()["preprocessing"]
    params = "".join(f'parameters {{ key: "{p}" value: {{ string_value: "x" }} }}\n' for p in sorted(req.parameters))
    inputs = ", ".join(
        f'{{ name: "{n}" data_type: TYPE_STRING dims: [ -1 ] optional: true }}' for n in sorted(req.inputs)
    )
    outputs = ", ".join(f'{{ name: "{n}" data_type: TYPE_INT32 dims: [ -1 ] }}' for n in sorted(req.outputs))
    config = parse(f'name: "preprocessing" backend: "python" input [ {inputs} ] output [ {outputs} ]\n{params}')
    assert check_model(config, req) == []


def _ensemble(inputs: set[str], outputs: set[str]) -> dict[str, model_config_pb2.ModelConfig]:
    step = parse(
        'name: "llm" backend: "python" '
        'input [ { name: "PROMPT" data_type: TYPE_STRING dims: [ 1 ] } ] '
        'output [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] }, '
        '{ name: "N_IN" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "N_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]'
    )
    declared = ", ".join(f'{{ name: "{n}" data_type: TYPE_STRING dims: [ 1 ] optional: true }}' for n in sorted(inputs))
    produced = {"text_output": "TEXT", "num_input_tokens": "N_IN", "num_output_tokens": "N_OUT"}
    out_decl = ", ".join(f'{{ name: "{n}" data_type: TYPE_STRING dims: [ -1 ] }}' for n in sorted(outputs))
    out_map = " ".join(f'output_map {{ key: "{produced[n]}" value: "{n}" }}' for n in sorted(outputs))
    ensemble = parse(
        f'name: "ens" platform: "ensemble" input [ {declared} ] output [ {out_decl} ] '
        f'ensemble_scheduling {{ step [ {{ model_name: "llm" model_version: -1 '
        f'input_map {{ key: "PROMPT" value: "text_input" }} {out_map} }} ] }}'
    )
    return {"ens": ensemble, "llm": step}


def test_ensemble_must_take_and_give_the_frontend_tensors() -> None:
    assert check_ensemble(_ensemble(set(FRONTEND_SENDS), set(FRONTEND_READS)), "ens") == []
    problems = check_ensemble(
        _ensemble(set(FRONTEND_SENDS) - {"stream"}, set(FRONTEND_READS) - {"num_input_tokens"}), "ens"
    )
    assert any("'stream'" in p and "sends" in p for p in problems), problems
    assert any("'num_input_tokens'" in p and "reads" in p for p in problems), problems
    assert check_ensemble(_ensemble(set(FRONTEND_SENDS), set(FRONTEND_READS)), "missing") != []


def test_cli_checks_a_repository_against_the_recorded_requirements(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "preprocessing" / "1").mkdir(parents=True)
    (repo / "preprocessing" / "config.pbtxt").write_text(OLD_PREPROCESSING)
    (repo / "preprocessing" / "1" / "model.py").write_text(MODEL_PY)
    app = typer.Typer()
    app.command()(main)
    result = CliRunner().invoke(app, [str(repo), "--ensemble", "preprocessing", "--requirements", str(RECORDED)])
    assert result.exit_code == 1
    assert "the recorded upstream version" in result.output, "a changed upstream model.py is reviewed, not shipped"
    assert "'multimodal_model_path' is read unconditionally" in result.output
    assert "platform '', expected 'ensemble'" in result.output


def test_build_script_pins_one_commit_and_emits_only_engine_tokenizer_and_repository() -> None:
    build = (TRTLLM_DIR / "build.sh").read_text(encoding="utf-8")
    result = subprocess.run(["bash", "-n", str(TRTLLM_DIR / "build.sh")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    commit = re.search(r'^TRTLLM_COMMIT="([0-9a-f]{40})"', build, re.MULTILINE)
    assert commit, "a full commit, not a tag"
    sources = (REPO_ROOT / "infra" / "production" / "sources.yaml").read_text(encoding="utf-8")
    assert commit.group(1) in sources, "the pinned commit is the cited submodule commit of tensorrtllm_backend r26.07"
    # Templates, fill tool and model.py all come from $SRC (that one checkout); the weights and the converted
    # checkpoint go to $SCRATCH, which the EXIT trap removes; $OUT gets exactly three entries.
    assert "trap 'rm -rf \"$SCRATCH\"' EXIT" in build
    written = set(re.findall(r'"\$OUT\.partial/([a-z_]+)', build))
    assert written == {"engine", "tokenizer", "model_repository"}, written
    assert '--local-dir "$SCRATCH/hf"' in build and '--output_dir "$SCRATCH/ckpt"' in build
    assert "infra.trtllm_check" in build and "initialize_requirements.json" in build
