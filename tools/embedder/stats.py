"""What one embedding client counts and times: call counters and the latency of each inference call."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from tools.stats import percentiles

LATENCY_WINDOW = 10_000
"""Inference-call latencies kept (the most recent ones)."""


@dataclass
class EmbedderStats:
    """Counters of one client since it was created (read them for logs or metrics).

    Attributes:
        requests: gRPC inference calls that returned a result.
        texts: texts embedded.
        truncated_texts: texts cut at the model's `max_tokens`.
        retries: transient failures that were retried.
        failures: inference calls that ended in an `EmbedderError`.
        overloaded: requests refused for lack of capacity (`EmbedderOverloadedError`; also counted in `failures`
            when Triton refused them).
        latencies_ms: latency of each successful gRPC inference call, ms (the most recent `LATENCY_WINDOW`).
    """

    requests: int = 0
    texts: int = 0
    truncated_texts: int = 0
    retries: int = 0
    failures: int = 0
    overloaded: int = 0
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))

    def latency_percentiles_ms(self, ps: Sequence[float] = (50, 95, 99)) -> dict[str, float]:
        """Percentiles of the recorded call latencies, ms, with their count (`tools.stats.percentiles`).

        Returns:
            e.g. `{"p50": 4.1, "p95": 9.0, "p99": 12.3, "n": 812.0}`; empty when nothing was recorded.
        """
        if not self.latencies_ms:
            return {}
        return {k: float(v) for k, v in percentiles(self.latencies_ms, ps).items()}
