"""The errors every store raises, whatever is behind it: the Postgres adapter (`tools.store`) and the in-memory
doubles alike, so the ports (`tools.ingest.ports`, `tools.retrieval`) declare them without naming an adapter.

`StoreUnavailableError` (the store is down, restarting or shutting down; retryable), its subclass `StoreBusyError`
(no pooled connection within the bounded acquire time; retryable), and `StoreQueryError` (the store refused or failed
a statement; not retryable). Bad input is a plain `StoreError`. Postgres' own exceptions become these in one place,
`tools.store.errors`.
"""

from __future__ import annotations


class StoreError(RuntimeError):
    """The store cannot be used as asked: unreachable, wrong embedder for the stored table, or bad input."""


class StoreUnavailableError(StoreError):
    """Postgres is unreachable, restarting or shutting down; the same call may succeed later (retryable)."""


class StoreBusyError(StoreUnavailableError):
    """No pooled connection became free within the bounded acquire time (`DB_ACQUIRE_TIMEOUT_S`); retryable."""


class StoreQueryError(StoreError):
    """Postgres refused or failed a statement (a bug, a schema problem, or a missing extension); not retryable."""
