"""The store's pure logic, no server: error translation (asyncpg's and the socket's exceptions -> the store's
types), how the interfaces classify the store's types, and search settings."""

from __future__ import annotations

import asyncpg
import pytest

from agent.core.failures import describe
from agent.http.errors import STATUS_OF_KIND
from tools.errors import StoreBusyError, StoreError, StoreQueryError, StoreUnavailableError
from tools.store.errors import translate, translated
from tools.store.search import settings_sql


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (asyncpg.ConnectionDoesNotExistError("connection was closed"), StoreUnavailableError),
        (asyncpg.CannotConnectNowError("the database system is starting up"), StoreUnavailableError),
        (asyncpg.AdminShutdownError("terminating connection due to administrator command"), StoreUnavailableError),
        (asyncpg.TooManyConnectionsError("too many clients"), StoreUnavailableError),
        (asyncpg.InterfaceError("connection is closed"), StoreUnavailableError),
        (FileNotFoundError(2, "No such file or directory"), StoreUnavailableError),
        (ConnectionRefusedError(111, "Connection refused"), StoreUnavailableError),
        (TimeoutError(), StoreUnavailableError),
        (asyncpg.UndefinedTableError('relation "chunks" does not exist'), StoreQueryError),
        (asyncpg.UndefinedObjectError('type "vector" does not exist'), StoreQueryError),
    ],
)
def test_postgres_and_socket_errors_become_the_stores(exc: Exception, expected: type[StoreError]) -> None:
    translated_error = translate(exc, "dense search")
    assert type(translated_error) is expected
    assert str(translated_error).startswith("dense search: ")


def test_a_missing_vector_type_gets_the_extension_hint() -> None:
    message = str(translate(asyncpg.UndefinedObjectError('type "vector" does not exist'), "connect"))
    assert 'type "vector" does not exist' in message and "CREATE EXTENSION vector" in message


def test_other_errors_pass_unchanged() -> None:
    assert translate(KeyError("bug"), "x") is None and translate(StoreError("bad input"), "x") is None
    with pytest.raises(KeyError), translated("x"):
        raise KeyError("bug")
    with pytest.raises(StoreUnavailableError) as info, translated("count"):
        raise asyncpg.ConnectionDoesNotExistError("closed")
    assert isinstance(info.value.__cause__, asyncpg.ConnectionDoesNotExistError)


@pytest.mark.parametrize(
    ("exc", "kind", "status", "retryable"),
    [
        (StoreUnavailableError("count: Postgres is unreachable"), "postgres_unavailable", 503, True),
        (StoreBusyError("count: no database connection free within 5 s"), "postgres_busy", 503, True),
        (StoreQueryError("dense search: Postgres: syntax error"), "postgres_error", 500, False),
        (StoreError("top_k=0; expected 1..1000"), "store_error", 503, True),
    ],
)
def test_store_errors_keep_their_kinds_and_statuses(exc: StoreError, kind: str, status: int, retryable: bool) -> None:
    failure = describe(exc)
    assert failure is not None and (failure.kind, failure.retryable) == (kind, retryable)
    assert STATUS_OF_KIND[kind] == status


def test_search_settings_are_local_to_the_transaction() -> None:
    assert settings_sql(100) == (
        "SET LOCAL hnsw.ef_search = 100; SET LOCAL hnsw.iterative_scan = strict_order; "
        "SET LOCAL plan_cache_mode = force_custom_plan"
    )
    assert settings_sql(40, exact=True).endswith("; SET LOCAL enable_indexscan = off")
    with pytest.raises(StoreError, match="ef_search=1001"):
        settings_sql(1001)


def test_read_replica_urls_come_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.config.settings import Settings

    monkeypatch.setenv("DATABASE_READ_URLS", "postgresql://rag@replica-1/rag, postgresql://rag@replica-2/rag")
    assert Settings(_env_file=None).database_read_urls == (  # type: ignore[call-arg]
        "postgresql://rag@replica-1/rag",
        "postgresql://rag@replica-2/rag",
    )
    monkeypatch.setenv("DATABASE_READ_URLS", "")
    assert Settings(_env_file=None).database_read_urls == ()  # type: ignore[call-arg]
    monkeypatch.setenv("DATABASE_READ_URLS", "http://replica/rag")
    with pytest.raises(ValueError, match="not a postgresql:// URL"):
        Settings(_env_file=None)  # type: ignore[call-arg]
