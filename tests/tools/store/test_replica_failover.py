"""A real streaming replica whose WAL stops arriving: the primary's WAL sender is stopped (SIGSTOP: the replica's
WAL receiver still says "streaming" and has replayed everything it received), or the replica disconnects. The
store stops reading from it within `DATABASE_READ_MAX_LAG_S`, and the production replica's readiness check
(`k8s/base/postgres-replica.yaml`, run here with bash against the same two servers) fails; both recover when WAL
flows again. The replica is cloned the way production clones it: `pg_basebackup -R` into a physical replication
slot."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from agent.config.settings import Settings
from evals.retrieval_eval import ensure_database
from tests import replica as standby
from tests.conftest import REPO_ROOT
from tests.pgbouncer import server_address
from tests.store_helpers import DIM, MODEL, own_postgres, record
from tools.store import VectorStore

DATABASE = "test_replica_failover"
SLOT = "rag_replica"
MAX_LAG_S = 1.0
POLL_S = 0.05
WAIT_S = 60.0
"""Bound of every wait for a condition (the replica catching up, the WAL sender reconnecting), seconds."""
SWITCH_SLACK_S = 4.0
"""Time beyond MAX_LAG_S a search may take to move to the primary: one poll, the probe's two queries and the search
itself on a 2-core machine loaded by a whole test run, seconds (a replica that is never left would hold the searches
for the whole WAIT_S)."""
PROD_DIR = REPO_ROOT / "infra" / "production"


@pytest.fixture(scope="module")
def primary(settings: Settings, postgres_url: str, server_root: Path) -> Iterator[str]:
    """A primary of this module's own (`postgres_url` marks the module `stack`); yields its server URL."""
    with own_postgres(settings, server_root, "replica-failover") as own:
        yield own.resolved_database_url()


@pytest.fixture(scope="module")
def replica(primary: str) -> Iterator[standby.Replica]:
    with standby.streaming_replica(primary, slot=SLOT) as running:
        yield running


async def fetchval(url: str, sql: str) -> object:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


async def wait_for(condition: Callable[[], Awaitable[bool]], what: str, timeout_s: float = WAIT_S) -> float:
    """Poll `condition` every POLL_S until it holds; fail naming `what` after `timeout_s`. Returns the seconds it
    took."""
    start = time.monotonic()
    while not await condition():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s")
        await asyncio.sleep(POLL_S)
    return time.monotonic() - start


async def wal_sender_pid(primary_url: str) -> int:
    """The PID of the WAL sender streaming from the replica's slot (a child of the primary this module started)."""
    pid = await fetchval(primary_url, f"SELECT active_pid FROM pg_replication_slots WHERE slot_name = '{SLOT}'")
    assert isinstance(pid, int), "no WAL sender on the replica's slot"
    return pid


async def streaming(primary_url: str) -> bool:
    """The slot is active and a WAL sender streams from it."""
    state = await fetchval(
        primary_url,
        "SELECT r.state FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid "
        f"WHERE s.slot_name = '{SLOT}'",
    )
    return state == "streaming"


@pytest.fixture
async def stores(primary: str, replica: standby.Replica) -> AsyncIterator[tuple[VectorStore, VectorStore]]:
    """(writer, reader): the writer has no replicas (its writes do not wait for one); the reader searches the
    replica, like another app process."""
    url = await ensure_database(primary, DATABASE)
    async with VectorStore(url, MODEL, DIM) as writer:
        await writer.delete_documents([d.doc_id for d in await writer.list_documents()])
        await standby.caught_up(url, replica.url(DATABASE))  # the reader never finds the database missing
        async with VectorStore(url, MODEL, DIM, read_urls=[replica.url(DATABASE)], read_max_lag_s=MAX_LAG_S) as reader:
            yield writer, reader


async def top_doc(store: VectorStore, doc_id: str) -> str:
    hits = await store.dense_search(record(doc_id, ["x"]).chunks[0].embedding, 1)
    return hits[0].doc_id if hits else ""


def readiness_script() -> str:
    """The production replica's readiness check (its `bash -c SCRIPT` exec probe)."""
    import yaml

    docs = yaml.safe_load_all((PROD_DIR / "k8s" / "base" / "postgres-replica.yaml").read_text(encoding="utf-8"))
    statefulset = next(d for d in docs if d and d["kind"] == "StatefulSet")
    command = statefulset["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"]
    assert command[:2] == ["bash", "-c"]
    script: str = command[2]
    return script


def readiness(primary_url: str, replica: standby.Replica) -> subprocess.CompletedProcess[str]:
    """Run the readiness check against the test's servers: the environment the pod gives it, pointed here."""
    primary_host, primary_port, user = server_address(primary_url)
    replica_host, replica_port, _ = server_address(replica.url(DATABASE))
    env = {
        **os.environ,
        "PATH": f"{standby.bin_dir()}:{os.environ['PATH']}",
        "PGUSER": user,
        "PGDATABASE": DATABASE,
        "PRIMARY_HOST": primary_host,
        "PRIMARY_PORT": str(primary_port),
        "REPLICA_HOST": replica_host,
        "REPLICA_PORT": str(replica_port),
        "DATABASE_READ_MAX_LAG_S": str(MAX_LAG_S),
    }
    return subprocess.run(
        ["bash", "-c", readiness_script()], env=env, capture_output=True, text=True, timeout=30, check=False
    )


async def test_the_replica_streams_from_a_physical_slot(primary: str, replica: standby.Replica) -> None:
    await wait_for(lambda: streaming(primary), "the replica streaming from its slot")
    assert await fetchval(primary, f"SELECT slot_type FROM pg_replication_slots WHERE slot_name = '{SLOT}'") == (
        "physical"
    )
    conf = (replica.data / "postgresql.auto.conf").read_text()
    assert f"primary_slot_name = '{SLOT}'" in conf


async def test_searches_leave_a_replica_whose_wal_sender_stopped_within_the_bound(
    primary: str, replica: standby.Replica, stores: tuple[VectorStore, VectorStore]
) -> None:
    writer, reader = stores
    await writer.add_documents([record("before", ["okapi"])])
    replica_url = replica.url(DATABASE)

    async def reader_uses_replica() -> bool:
        reader.search_targets.clear()
        return await top_doc(reader, "before") == "before" and set(reader.search_targets) == {replica_url}

    await wait_for(reader_uses_replica, "searches on the replica once it has the first document")
    assert readiness(primary, replica).returncode == 0, readiness(primary, replica).stdout
    sender = await wal_sender_pid(primary)
    os.kill(sender, signal.SIGSTOP)  # the WAL sender stops sending; the replica still says "streaming"
    try:
        await writer.add_documents([record("after", ["giraffe"])])
        written = time.monotonic()
        assert await fetchval(replica_url, "SELECT status FROM pg_stat_wal_receiver") == "streaming"

        async def reader_on_primary() -> bool:
            reader.search_targets.clear()
            found = await top_doc(reader, "after")
            return set(reader.search_targets) == {"primary"} and found == "after"

        await wait_for(reader_on_primary, "searches moving to the primary while the replica misses a write")
        switched_after_s = time.monotonic() - written
        assert switched_after_s <= MAX_LAG_S + SWITCH_SLACK_S, (
            f"searches read the stale replica for {switched_after_s:.2f} s after the write "
            f"(bound {MAX_LAG_S} s + {SWITCH_SLACK_S} s slack)"
        )
        assert await fetchval(replica_url, "SELECT count(*) FROM documents WHERE doc_id = 'after'") == 0, (
            "the replica got the write: the WAL sender was not stopped"
        )
        check = readiness(primary, replica)
        assert check.returncode != 0 and "replay did not reach the primary's" in check.stdout, check.stdout
    finally:
        os.kill(sender, signal.SIGCONT)

    async def reader_back_on_replica() -> bool:
        reader.search_targets.clear()
        return await top_doc(reader, "after") == "after" and set(reader.search_targets) == {replica_url}

    await wait_for(reader_back_on_replica, "searches back on the replica once it replayed the write")
    assert readiness(primary, replica).returncode == 0


async def test_readiness_fails_while_the_replica_is_not_streaming(primary: str, replica: standby.Replica) -> None:
    replica_url = replica.url(DATABASE)
    await wait_for(lambda: streaming(primary), "the replica streaming")
    assert readiness(primary, replica).returncode == 0
    conn = await asyncpg.connect(replica_url)
    conninfo = await conn.fetchval("SHOW primary_conninfo")  # written by pg_basebackup -R
    try:
        await conn.execute("ALTER SYSTEM SET primary_conninfo = ''")  # the WAL receiver stops and cannot reconnect
        await conn.execute("SELECT pg_reload_conf()")

        async def not_streaming() -> bool:
            return await fetchval(replica_url, "SELECT count(*) FROM pg_stat_wal_receiver") == 0

        await wait_for(not_streaming, "the WAL receiver stopping")
        check = readiness(primary, replica)
        assert check.returncode != 0 and "not streaming from the primary" in check.stdout, check.stdout
    finally:
        quoted = str(conninfo).replace("'", "''")
        await conn.execute(f"ALTER SYSTEM SET primary_conninfo = '{quoted}'")
        await conn.execute("SELECT pg_reload_conf()")
        await conn.close()
    await wait_for(lambda: streaming(primary), "the replica streaming again")
    assert readiness(primary, replica).returncode == 0
