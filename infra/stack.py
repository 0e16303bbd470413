"""The local stack as one unit: `up` starts Postgres, Triton and vLLM (in that order), `down` stops them by PID,
`status` reports each with a health check, `stop_under` stops every stack recorded under a directory."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from infra import postgres, processes, triton, vllm
from infra.config import StackConfig

SERVICES: dict[str, ModuleType] = {"postgres": postgres, "triton": triton, "vllm": vllm}


@dataclass(frozen=True)
class ServiceStatus:
    """One service: its PID if our PID file names a live process, whether its health check passes, detail.

    `metrics` holds service figures where the service exports them (Triton: `infra.triton.metrics_summary`, per
    model, plus `url`), else it is empty.
    """

    name: str
    pid: int | None
    healthy: bool
    detail: str
    metrics: dict[str, Any] = field(default_factory=dict)


class UpProgress(Protocol):
    """What `up` reports while it works through the services, in order."""

    def starting(self, name: str) -> None:
        """Service `name` is being started (or checked, when it runs already)."""

    def ready(self, name: str, pid: int, seconds: float) -> None:
        """Service `name` answers its health check; `seconds` it took `up` to get it there (wall time)."""


def up(
    config: StackConfig, services: tuple[str, ...] | None = None, progress: UpProgress | None = None
) -> dict[str, int]:
    """Start the given services (default `config.services`) idempotently, one after another, reporting each to
    `progress`; return name -> PID.

    Postgres is skipped when `DATABASE_URL` is set.

    Raises:
        processes.ServiceError: an unknown service name (checked before anything starts), or a service could not
            start (port taken, missing model, start-up timeout, the embedded Postgres still shutting down).
    """
    names = services or config.services
    unknown = [name for name in names if name not in SERVICES]
    if unknown:
        raise processes.ServiceError(f"unknown service(s) {', '.join(unknown)}; expected some of {', '.join(SERVICES)}")
    pids: dict[str, int] = {}
    for name in names:
        if name == "postgres" and config.database_url:
            continue
        if progress is not None:
            progress.starting(name)
        start = time.perf_counter()
        pids[name] = SERVICES[name].start(config)
        if progress is not None:
            progress.ready(name, pids[name], time.perf_counter() - start)
    return pids


def down(config: StackConfig) -> list[str]:
    """Stop every local service that has a PID file, LLM first; return the names that were running."""
    return [name for name in ("vllm", "triton", "postgres") if SERVICES[name].stop(config)]


def stop_under(root: Path) -> list[str]:
    """Stop every local service recorded anywhere under `root`, whatever data dirs and ports it was started with.

    Every PID file in a `run` directory is stopped by `processes.stop_service` (only while it names the process it
    recorded), Postgres with its fast shutdown; an embedded Postgres data dir (`pgdata`) whose `postmaster.pid` names
    a live postmaster is stopped too (a start interrupted before the PID file was written). Symbolic links are not
    followed. Used to stop what a test session started once its process is gone (`infra.watchdog`).

    Returns:
        What was running and is now stopped, as `name (directory)` strings, LLM and Triton before Postgres.
    """
    services: list[tuple[Path, str]] = []
    data_dirs: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here.name == "pgdata":
            dirnames.clear()
            data_dirs.append(here)
        elif here.name == "run":
            services += [(here, f.removesuffix(".pid")) for f in filenames if f.endswith(".pid")]
    stopped = []
    for run_dir, name in sorted(services, key=lambda s: s[1] == postgres.NAME):
        sig = postgres.STOP_SIGNAL if name == postgres.NAME else signal.SIGTERM
        if processes.stop_service(run_dir, name, sig=sig):
            stopped.append(f"{name} ({run_dir})")
    for path in data_dirs:
        if postgres.postmaster_pid(path) is not None and postgres.stop_data_dir(path.parent / "run", path):
            stopped.append(f"{postgres.NAME} ({path})")
    return stopped


def status(config: StackConfig) -> list[ServiceStatus]:
    """Status of the three local services (Postgres reported as external when `DATABASE_URL` is set)."""
    run_dir = config.run_dir.resolve()
    result = []
    pg_pid = processes.read_pid(run_dir, "postgres")
    if config.database_url:
        result.append(ServiceStatus("postgres", None, True, "external (DATABASE_URL)"))
    else:
        uri = postgres.running_uri(config)
        result.append(ServiceStatus("postgres", pg_pid, uri is not None, uri or "not running"))
    checks: dict[str, tuple[Callable[[], bool], str]] = {
        "triton": (
            lambda: triton.is_ready(config),
            f"grpc {config.triton_grpc_url}, model {config.embedder_model}, "
            f"metrics http://127.0.0.1:{config.triton_metrics_port}/metrics",
        ),
        "vllm": (lambda: vllm.is_ready(config), f"{config.llm_base_url} model {config.llm_model}"),
    }
    for name, (check, detail) in checks.items():
        try:
            ok = check()
        except Exception:  # noqa: BLE001 - unreachable means unhealthy
            ok = False
        metrics: dict[str, Any] = {}
        if name == "triton" and ok:
            metrics, detail = _triton_metrics(config, detail)
        result.append(ServiceStatus(name, processes.read_pid(run_dir, name), ok, detail, metrics))
    return result


def _triton_metrics(config: StackConfig, detail: str) -> tuple[dict[str, Any], str]:
    """Triton's Prometheus metrics summarised per model, and the detail line extended with the embedder's figures."""
    try:
        per_model = triton.metrics_summary(config)
    except Exception as exc:  # noqa: BLE001 - metrics are informational; health is decided by the ready check
        return {"url": triton.metrics_url(config), "error": str(exc)}, f"{detail} (metrics unavailable: {exc})"
    figures = per_model.get(config.embedder_model)
    if figures:
        detail += (
            f"; {config.embedder_model} since start: {figures['requests']:.0f} requests, "
            f"{figures['failures']:.0f} failed, mean batch {figures['mean_batch']}, mean {figures['mean_request_ms']} "
            f"ms (queue {figures['mean_queue_ms']} ms)"
        )
    return {"url": triton.metrics_url(config), "models": per_model}, detail
