"""The local Triton Inference Server: the `tritonserver` binary bundled in PyPI `nvidia-pytriton` (Triton 2.51).

Run directly against our `model_repository/` (not through PyTriton's Python API). The bundled build has only the
Python backend, so a backend directory is laid out in the data dir with `python/` (the backend library and the
stub built for the running interpreter) and `onnxruntime/model.py` (our CPU onnxruntime backend), which serves
`platform: "onnxruntime_onnx"` models unchanged.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

import httpx

from infra import processes
from infra.config import StackConfig
from tools.packages import package_dir

NAME = "triton"
ONNXRUNTIME_BACKEND = Path(__file__).resolve().parent / "backends" / "onnxruntime" / "model.py"
"""Our CPU onnxruntime backend for Triton's Python backend (package data of `infra`)."""


def _pytriton_root() -> Path:
    return package_dir("pytriton") / "tritonserver"


def backend_dir(config: StackConfig) -> Path:
    """Lay out (idempotently) and return the Triton backend directory under the data dir.

    Raises:
        processes.ServiceError: nvidia-pytriton has no Python-backend stub for this Python version.
    """
    root = _pytriton_root()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise processes.ServiceError(f"nvidia-pytriton ships no Python backend stub for Python {version} ({stub})")
    target = config.data_dir.resolve() / "triton" / "backends"
    python_dir = target / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for src in (
        *(root / "backends" / "python").glob("*.so"),
        root / "backends" / "python" / "triton_python_backend_utils.py",
        stub,
    ):
        dst = python_dir / src.name
        if not dst.exists() or dst.stat().st_size != src.stat().st_size:
            shutil.copy2(src, dst)
    ort_dir = target / "onnxruntime"
    ort_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ONNXRUNTIME_BACKEND, ort_dir / "model.py")
    return target


def server_env(python_env: Path) -> dict[str, str]:
    """Environment for `tritonserver`: bundled libs and this interpreter's LIBDIR first, the backend's Python
    environment `python_env` (`TRITON_PYTHON_ENV`, default `.venv-triton`, made by infra/setup.sh) first on PATH.

    Without LIBDIR first the stub loads the system libpython against this interpreter's stdlib and model init
    fails; the stub finds packages (onnxruntime, numpy) through `python3` on PATH. That environment is separate
    from the app's because the stub of nvidia-pytriton 0.7 is built against numpy 1.x (with numpy 2 it returns
    empty or wrong output tensors) while vLLM needs numpy 2.

    Raises:
        processes.ServiceError: the backend environment does not exist.
    """
    if not (python_env / "bin" / "python3").exists():
        raise processes.ServiceError(
            f"Triton's Python backend environment {python_env} is missing: run `bash infra/setup.sh`"
        )
    libs = package_dir("pytriton").parent / "nvidia_pytriton.libs"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, str(libs), env.get("LD_LIBRARY_PATH", "")) if p)
    env["PATH"] = os.pathsep.join((str(python_env / "bin"), env.get("PATH", "")))
    return env


def served_models(config: StackConfig) -> list[str]:
    """Models the local Triton loads: the embedder (bulk ingestion), the model questions are embedded with (its
    interactive twin, often the same), `config.triton_extra_models`, the support check's verifier (`SUPPORT_MODEL`,
    unless `SUPPORT_CHECK=off`; the local one's int8 graph ships in git), then the reranker when its `1/model.onnx`
    exists (it is trained, not shipped: `python -m evals.train_reranker`); duplicates dropped."""
    reranker = config.model_repository / config.reranker_model / "1" / "model.onnx"
    optional = (config.reranker_model,) if reranker.is_file() else ()
    verifier = (config.support_model,) if config.support_check != "off" else ()
    return list(
        dict.fromkeys(
            (
                config.embedder_model,
                config.embedder_interactive_model,
                *config.triton_extra_models,
                *verifier,
                *optional,
            )
        )
    )


def argv(config: StackConfig) -> list[str]:
    """Command line of the local `tritonserver`; only `served_models` are loaded (explicit model control)."""
    return [
        str(_pytriton_root() / "bin" / "tritonserver"),
        f"--model-repository={config.model_repository.resolve()}",
        f"--backend-directory={backend_dir(config)}",
        "--model-control-mode=explicit",
        *(f"--load-model={name}" for name in served_models(config)),
        f"--grpc-port={config.triton_grpc_port}",
        f"--http-port={config.triton_http_port}",
        f"--metrics-port={config.triton_metrics_port}",
        "--allow-gpu-metrics=false",
        "--log-verbose=0",
    ]


def is_ready(config: StackConfig) -> bool:
    """True when the server and every served model answer ready on Triton's HTTP endpoint (KServe v2)."""
    base = f"http://127.0.0.1:{config.triton_http_port}/v2"
    with httpx.Client(timeout=2.0) as client:
        if client.get(f"{base}/health/ready").status_code != 200:
            return False
        return all(client.get(f"{base}/models/{name}/ready").status_code == 200 for name in served_models(config))


def metrics_url(config: StackConfig) -> str:
    """Triton's Prometheus metrics endpoint of the local server."""
    return f"http://127.0.0.1:{config.triton_metrics_port}/metrics"


def metrics_summary(config: StackConfig, timeout_s: float = 2.0) -> dict[str, dict[str, float]]:
    """Per-model figures from Triton's Prometheus `/metrics` (Triton docs, "Metrics": `nv_inference_*` counters).

    Returns:
        model name -> `{"requests", "failures", "executions", "inferences", "mean_batch", "mean_request_ms",
        "mean_queue_ms", "mean_compute_ms"}`: request and failure counts (`nv_inference_request_success` /
        `_failure`), model executions (`nv_inference_exec_count`) and items inferred (`nv_inference_count`),
        their ratio (the mean batch size the dynamic batcher formed), and mean request / queue / compute time
        per request in ms (cumulative `*_duration_us` counters divided by the request count). Counters are
        cumulative since the server started.

    Raises:
        httpx.HTTPError: the endpoint is unreachable or answers an error (timeout `timeout_s` seconds).
    """
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(metrics_url(config), timeout=timeout_s)
    response.raise_for_status()
    wanted = {
        "nv_inference_request_success": "requests",
        "nv_inference_request_failure": "failures",
        "nv_inference_exec_count": "executions",
        "nv_inference_count": "inferences",
        "nv_inference_request_duration_us": "request_us",
        "nv_inference_queue_duration_us": "queue_us",
        "nv_inference_compute_infer_duration_us": "compute_us",
    }
    raw: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            key = wanted.get(sample.name.removesuffix("_total"))
            model = sample.labels.get("model")
            if key and model:
                per_model = raw.setdefault(model, {})
                per_model[key] = per_model.get(key, 0.0) + float(sample.value)
    summary: dict[str, dict[str, float]] = {}
    for model, v in raw.items():
        requests, executions = v.get("requests", 0.0), v.get("executions", 0.0)
        summary[model] = {
            "requests": requests,
            "failures": v.get("failures", 0.0),
            "executions": executions,
            "inferences": v.get("inferences", 0.0),
            "mean_batch": round(v.get("inferences", 0.0) / executions, 2) if executions else 0.0,
            "mean_request_ms": round(v.get("request_us", 0.0) / requests / 1000, 3) if requests else 0.0,
            "mean_queue_ms": round(v.get("queue_us", 0.0) / requests / 1000, 3) if requests else 0.0,
            "mean_compute_ms": round(v.get("compute_us", 0.0) / requests / 1000, 3) if requests else 0.0,
        }
    return summary


def start(config: StackConfig) -> int:
    """Start Triton in the background unless running; wait until the model is ready; return its PID.

    Raises:
        processes.ServiceError: the model repository or an ONNX file is missing, a port is taken, or the server does
            not become ready.
    """
    run_dir = config.run_dir.resolve()
    pid = processes.read_pid(run_dir, NAME)
    if pid is None:
        if not config.model_repository.is_dir():
            raise processes.ServiceError(
                f"MODEL_REPOSITORY={config.model_repository} is not a directory: run from the source checkout or "
                "set MODEL_REPOSITORY to a Triton model repository"
            )
        for name in served_models(config):
            onnx_file = config.model_repository / name / "1" / "model.onnx"
            if not onnx_file.is_file():
                raise processes.ServiceError(f"{onnx_file} is missing: run `python -m infra.export_onnx {name}` first")
        processes.require_free_ports(
            NAME,
            {
                "TRITON_GRPC_URL": config.triton_grpc_port,
                "TRITON_HTTP_PORT": config.triton_http_port,
                "TRITON_METRICS_PORT": config.triton_metrics_port,
            },
        )
        pid = processes.spawn(run_dir, NAME, argv(config), env=server_env(config.triton_python_env))
    processes.wait_until_ready(NAME, lambda: is_ready(config), config.triton_start_timeout_s, pid, run_dir)
    return pid


def stop(config: StackConfig) -> bool:
    """Stop the local Triton by PID (SIGTERM drains in-flight requests); True if it was running."""
    return processes.stop_service(config.run_dir.resolve(), NAME, timeout_s=30.0)
