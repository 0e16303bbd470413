"""The local stack as one unit: `up` starts Postgres, Triton and vLLM (in that order), `down` stops them by PID,
`status` reports each with a health check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from agent.settings import Settings
from infra import postgres, processes, triton, vllm

SERVICES: dict[str, ModuleType] = {"postgres": postgres, "triton": triton, "vllm": vllm}


@dataclass(frozen=True)
class ServiceStatus:
    """One service: its PID if our PID file names a live process, whether its health check passes, detail."""

    name: str
    pid: int | None
    healthy: bool
    detail: str


def up(settings: Settings, services: tuple[str, ...] | None = None) -> dict[str, int]:
    """Start the given services (default `settings.services`) idempotently; return name -> PID.

    Postgres is skipped when `DATABASE_URL` is set.

    Raises:
        processes.ServiceError: a service could not start (port taken, missing model, start-up timeout).
    """
    pids: dict[str, int] = {}
    for name in services or settings.services:
        if name == "postgres" and settings.database_url:
            continue
        pids[name] = SERVICES[name].start(settings)
    return pids


def down(settings: Settings) -> list[str]:
    """Stop every local service that has a PID file, LLM first; return the names that were running."""
    return [name for name in ("vllm", "triton", "postgres") if SERVICES[name].stop(settings)]


def status(settings: Settings) -> list[ServiceStatus]:
    """Status of the three local services (Postgres reported as external when `DATABASE_URL` is set)."""
    run_dir = settings.run_dir.resolve()
    result = []
    pg_pid = processes.read_pid(run_dir, "postgres")
    if settings.database_url:
        result.append(ServiceStatus("postgres", None, True, "external (DATABASE_URL)"))
    else:
        uri = postgres.running_uri(settings)
        result.append(ServiceStatus("postgres", pg_pid, uri is not None, uri or "not running"))
    checks: dict[str, tuple[Callable[[], bool], str]] = {
        "triton": (
            lambda: triton.is_ready(settings),
            f"grpc {settings.triton_grpc_url}, model {settings.embedder_model}, "
            f"metrics http://127.0.0.1:{settings.triton_metrics_port}/metrics",
        ),
        "vllm": (lambda: vllm.is_ready(settings), f"{settings.llm_base_url} model {settings.llm_model}"),
    }
    for name, (check, detail) in checks.items():
        try:
            ok = check()
        except Exception:  # noqa: BLE001 - unreachable means unhealthy
            ok = False
        result.append(ServiceStatus(name, processes.read_pid(run_dir, name), ok, detail))
    return result
