"""The embedder's Prometheus metrics, in prometheus_client's default registry (the app's `/metrics` serves it).

`rag_embedder_slot_wait_seconds`: how long each embedding request waited for one of its client's in-flight slots
(`TRITON_MAX_IN_FLIGHT`) before going to Triton, seconds. Waits here are invisible to Triton's own queue metrics
(`nv_inference_queue_duration_us`, `nv_inference_pending_request_count`); a growing wait means the limit, not
Triton, holds the load back: raise the limit (so the excess reaches Triton's queue, where its autoscaler sees it)
or add replicas. A request that gave up after `TRITON_TIMEOUT_S` is observed with its full wait.
"""

from __future__ import annotations

from prometheus_client import Histogram

SLOT_WAIT_SECONDS = Histogram(
    "rag_embedder_slot_wait_seconds",
    "Time an embedding request waited for an in-flight slot of its client (TRITON_MAX_IN_FLIGHT), seconds.",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
