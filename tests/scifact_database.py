"""A database of its own on the test Postgres holding the first SciFact abstracts, for the stack tests that serve a
small store (`rag serve`, `rag mcp`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from agent.config.settings import Settings
from agent.core.wiring import open_ingestion
from evals.scifact import SCIFACT_DIR


async def scifact_database(postgres_url: str, database: str, documents: int, settings: Settings, folder: Path) -> str:
    """(Re)create `database` on the server of `postgres_url` and ingest the first `documents` SciFact abstracts
    into it with `settings` (their embedder), writing the corpus file under `folder`.

    Returns:
        the database's URL.
    """
    conn = await asyncpg.connect(postgres_url)
    await conn.execute(f"DROP DATABASE IF EXISTS {database}")
    await conn.execute(f"CREATE DATABASE {database}")
    await conn.close()
    dsn = urlunsplit(urlsplit(postgres_url)._replace(path=f"/{database}"))
    with (SCIFACT_DIR / "corpus.jsonl").open() as handle:
        lines = [next(handle) for _ in range(documents)]
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(lines))
    async with open_ingestion(settings.model_copy(update={"database_url": dsn})) as ingestion:
        await ingestion.ingest_files([corpus])
    return dsn
