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

from agent.settings import REPO_ROOT, Settings
from infra import processes
from tools.packages import package_dir

NAME = "triton"
ONNXRUNTIME_BACKEND = REPO_ROOT / "infra" / "backends" / "onnxruntime" / "model.py"


def _pytriton_root() -> Path:
    return package_dir("pytriton") / "tritonserver"


def backend_dir(settings: Settings) -> Path:
    """Lay out (idempotently) and return the Triton backend directory under the data dir.

    Raises:
        processes.ServiceError: nvidia-pytriton has no Python-backend stub for this Python version.
    """
    root = _pytriton_root()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise processes.ServiceError(f"nvidia-pytriton ships no Python backend stub for Python {version} ({stub})")
    target = settings.data_dir.resolve() / "triton" / "backends"
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


def server_env() -> dict[str, str]:
    """Environment for `tritonserver`: bundled libs and this interpreter's LIBDIR first, this venv first on PATH.

    Without LIBDIR first the stub loads the system libpython against this interpreter's stdlib and model init
    fails; the stub finds packages (onnxruntime, numpy) through `python3` on PATH.
    """
    libs = package_dir("pytriton").parent / "nvidia_pytriton.libs"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, str(libs), env.get("LD_LIBRARY_PATH", "")) if p)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    return env


def grpc_port(settings: Settings) -> int:
    """The gRPC port of `settings.triton_grpc_url` (host:port)."""
    return int(settings.triton_grpc_url.rsplit(":", 1)[1])


def argv(settings: Settings) -> list[str]:
    """Command line of the local `tritonserver`; only the configured embedder is loaded (explicit control)."""
    return [
        str(_pytriton_root() / "bin" / "tritonserver"),
        f"--model-repository={settings.model_repository.resolve()}",
        f"--backend-directory={backend_dir(settings)}",
        "--model-control-mode=explicit",
        f"--load-model={settings.embedder_model}",
        f"--grpc-port={grpc_port(settings)}",
        f"--http-port={settings.triton_http_port}",
        f"--metrics-port={settings.triton_metrics_port}",
        "--allow-gpu-metrics=false",
        "--log-verbose=0",
    ]


def is_ready(settings: Settings) -> bool:
    """True when the server and the embedder model answer ready on Triton's HTTP endpoint (KServe v2)."""
    base = f"http://127.0.0.1:{settings.triton_http_port}/v2"
    with httpx.Client(timeout=2.0) as client:
        server = client.get(f"{base}/health/ready")
        model = client.get(f"{base}/models/{settings.embedder_model}/ready")
    return server.status_code == 200 and model.status_code == 200


def start(settings: Settings) -> int:
    """Start Triton in the background unless running; wait until the model is ready; return its PID.

    Raises:
        processes.ServiceError: a port is taken, the ONNX file is missing, or the server does not become ready.
    """
    run_dir = settings.run_dir.resolve()
    pid = processes.read_pid(run_dir, NAME)
    if pid is None:
        onnx_file = settings.model_repository / settings.embedder_model / "1" / "model.onnx"
        if not onnx_file.is_file():
            raise processes.ServiceError(
                f"{onnx_file} is missing: run `python -m infra.export_onnx {settings.embedder_model}` first"
            )
        processes.require_free_ports(
            NAME,
            {
                "TRITON_GRPC_URL": grpc_port(settings),
                "TRITON_HTTP_PORT": settings.triton_http_port,
                "TRITON_METRICS_PORT": settings.triton_metrics_port,
            },
        )
        pid = processes.spawn(run_dir, NAME, argv(settings), env=server_env())
    processes.wait_until_ready(NAME, lambda: is_ready(settings), settings.triton_start_timeout_s, pid, run_dir)
    return pid


def stop(settings: Settings) -> bool:
    """Stop the local Triton by PID (SIGTERM drains in-flight requests); True if it was running."""
    return processes.stop_service(settings.run_dir.resolve(), NAME, timeout_s=30.0)
