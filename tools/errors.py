"""The errors the ports declare, whatever is behind them, so that ingestion and retrieval name no adapter: every
store's (the Postgres adapter `tools.store` and the in-memory doubles alike) and every embedder's (`tools.embedder`,
Triton; the doubles of the tests).

`StoreUnavailableError` (the store is down, restarting or shutting down; retryable), its subclass `StoreBusyError`
(no pooled connection within the bounded acquire time; retryable), and `StoreQueryError` (the store refused or failed
a statement; not retryable). Bad input is a plain `StoreError`. Postgres' own exceptions become these in one place,
`tools.store.errors`.

`EmbedderError` (embedding failed) and its subclass `EmbedderOverloadedError` (no capacity now; retryable later);
tritonclient's exceptions become these in `tools.embedder.errors`.
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


class EmbedderError(RuntimeError):
    """Embedding failed: bad input, Triton unreachable or not ready, a timeout, or a bad model output."""


class EmbedderOverloadedError(EmbedderError):
    """Triton (or this client) refused the request for lack of capacity; trying again later may succeed.

    Raised without retrying when Triton's queue for the model is full or the request outwaited its queue timeout
    (the model's `dynamic_batching.default_queue_policy`), and when this client waited `timeout_s` for a free
    in-flight slot. An HTTP API answers it with 503 Service Unavailable and a `Retry-After` header.
    """
