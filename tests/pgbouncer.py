"""A real PgBouncer (Debian's `pgbouncer` 1.18) in transaction mode in front of a test Postgres: started on a free
port with its own ini in a temp dir, stopped by PID in a `finally`.

PgBouncer refuses to run as root, so it runs as the embedded Postgres' system user (`pgserver`), which can reach
the server's unix socket in its data dir.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from infra.processes import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
PGBOUNCER = next(
    (
        p
        for p in (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer", str(REPO_ROOT / ".tools/usr/sbin/pgbouncer"))
        if p and Path(p).exists()
    ),
    "pgbouncer",
)
RUN_AS = "pgserver"
START_TIMEOUT_S = 30.0


def server_address(url: str) -> tuple[str, int, str]:
    """(host or socket dir, port, user) of a `postgresql://` URL (the embedded server's: a unix socket dir)."""
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or "localhost"])[0]
    return host, parts.port or 5432, parts.username or "postgres"


@contextmanager
def pgbouncer(postgres_url: str, pool_size: int = 4) -> Iterator[str]:
    """Run PgBouncer in transaction mode in front of the server of `postgres_url`; yields the URL template
    `postgresql://user@127.0.0.1:PORT/{database}` (any database of that server passes through)."""
    if not Path(PGBOUNCER).exists():
        pytest.fail("pgbouncer is not installed: infra/test.sh unpacks Debian's into .tools/")
    host, port, user = server_address(postgres_url)
    listen = free_port()
    account = pwd.getpwnam(RUN_AS)
    workdir = Path(tempfile.mkdtemp(prefix="rag-pgbouncer-"))
    os.chown(workdir, account.pw_uid, account.pw_gid)
    (workdir / "userlist.txt").write_text(f'"{user}" ""\n')
    (workdir / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {workdir / "userlist.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 200
server_reset_query =
logfile = {workdir / "pgbouncer.log"}
pidfile =
"""
    )
    process = subprocess.Popen(
        [PGBOUNCER, "-u", RUN_AS, str(workdir / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # until it accepts connections (or exits)
            if process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {process.returncode}: {log_tail(workdir)}")
            try:
                socket.create_connection(("127.0.0.1", listen), timeout=1).close()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    message = f"pgbouncer did not listen within {START_TIMEOUT_S} s: {log_tail(workdir)}"
                    raise RuntimeError(message) from exc
                time.sleep(0.05)
        yield f"postgresql://{user}@127.0.0.1:{listen}/{{database}}"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # immediate shutdown
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def log_tail(workdir: Path) -> str:
    log = workdir / "pgbouncer.log"
    return "\n".join(log.read_text(errors="replace").splitlines()[-10:]) if log.exists() else "(no log)"
