"""Stage timers: one measurement per stage feeds both the stage timings of a result (`timings_ms`, ms) and an
OpenTelemetry span `rag.<stage>`.

Spans go through the OpenTelemetry API only: with no SDK configured (no `OTEL_EXPORTER_OTLP_ENDPOINT`, see
`agent.telemetry`) the tracer is the API's no-op one, so a timer costs two `perf_counter` calls and a no-op span.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

TRACER_NAME = "triton_rag"


@contextmanager
def timed(
    stage: str, timings: dict[str, float] | None = None, key: str | None = None, **attributes: AttributeValue
) -> Iterator[trace.Span]:
    """Time the block as stage `stage`: a span `rag.<stage>` with `attributes` and `duration_ms`, and the elapsed
    milliseconds added to `timings[key or stage]` (when `timings` is given; several blocks may add to one key, e.g.
    dense and full-text search into `search`). An exception is recorded on the span and re-raised."""
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(f"rag.{stage}", attributes=attributes) as span:
        start = time.perf_counter()
        try:
            yield span
        finally:
            elapsed_ms = (time.perf_counter() - start) * 1000
            span.set_attribute("duration_ms", elapsed_ms)
            if timings is not None:
                name = key or stage
                timings[name] = timings.get(name, 0.0) + elapsed_ms


def record(stage: str, elapsed_ms: float, timings: dict[str, float], **attributes: AttributeValue | None) -> None:
    """Store a stage measured elsewhere (`elapsed_ms`, ms, ending now) in `timings[stage]` and as a span
    `rag.<stage>` spanning those milliseconds; attributes that are None are left out."""
    timings[stage] = elapsed_ms
    end_ns = time.time_ns()
    attrs: dict[str, AttributeValue] = {k: v for k, v in attributes.items() if v is not None}
    attrs["duration_ms"] = elapsed_ms
    span = trace.get_tracer(TRACER_NAME).start_span(
        f"rag.{stage}", start_time=end_ns - int(elapsed_ms * 1e6), attributes=attrs
    )
    span.end(end_time=end_ns)
