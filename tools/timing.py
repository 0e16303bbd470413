"""Stage timings: one measurement per stage feeds both the timings a result reports (`timings_ms`, ms) and an
OpenTelemetry span `rag.<stage>`.

`StageTimings` is the one mechanism: a run (one retrieval, one answer) owns one, times its stages with
`StageTimings.stage(...)` (or `record(...)` for a stage measured elsewhere, e.g. the LLM's time to first token), and
merges the timings of the runs it calls with `add`. `timed` is the same timer for code that keeps no timings (a span
only, e.g. one Triton inference).

Spans go through the OpenTelemetry API only: with no SDK configured (no `OTEL_EXPORTER_OTLP_ENDPOINT`, see
`agent.core.telemetry`) the tracer is the API's no-op one, so a timer costs two `perf_counter` calls and a no-op span.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

TRACER_NAME = "triton_rag"


class StageTimings:
    """Milliseconds per stage of one run, each also a span `rag.<stage>`.

    A stage timed twice adds up (two searches of one answer: `search` is their sum), unless `record` replaces it.
    """

    def __init__(self) -> None:
        self._ms: dict[str, float] = {}

    @contextmanager
    def stage(self, stage: str, key: str | None = None, **attributes: AttributeValue) -> Iterator[trace.Span]:
        """Time the block as stage `stage` (a span `rag.<stage>` with `attributes` and `duration_ms`) and add its
        elapsed ms to `key or stage`. An exception is recorded on the span and re-raised; the time still counts."""
        with _span(stage, attributes, lambda ms: self.add({key or stage: ms})) as span:
            yield span

    def record(self, stage: str, elapsed_ms: float, **attributes: AttributeValue | None) -> None:
        """Set `stage` to `elapsed_ms` (ms, measured elsewhere, ending now) and emit a span `rag.<stage>` covering
        those milliseconds; attributes that are None are left out."""
        self._ms[stage] = elapsed_ms
        end_ns = time.time_ns()
        attrs: dict[str, AttributeValue] = {k: v for k, v in attributes.items() if v is not None}
        attrs["duration_ms"] = elapsed_ms
        span = trace.get_tracer(TRACER_NAME).start_span(
            f"rag.{stage}", start_time=end_ns - int(elapsed_ms * 1e6), attributes=attrs
        )
        span.end(end_time=end_ns)

    def add(self, timings_ms: Mapping[str, float]) -> None:
        """Add the ms of another run's stages (e.g. a retrieval's `timings_ms`) to these, stage by stage."""
        for stage, ms in timings_ms.items():
            self._ms[stage] = self._ms.get(stage, 0.0) + ms

    def get(self, stage: str) -> float | None:
        """The ms of `stage`, None when it was not timed."""
        return self._ms.get(stage)

    def as_dict(self, digits: int | None = None) -> dict[str, float]:
        """`{stage: ms}` in the order stages were first timed, rounded to `digits` when given."""
        if digits is None:
            return dict(self._ms)
        return {stage: round(ms, digits) for stage, ms in self._ms.items()}


@contextmanager
def timed(stage: str, **attributes: AttributeValue) -> Iterator[trace.Span]:
    """A span `rag.<stage>` around the block with `attributes` and `duration_ms` (no timings kept; see
    `StageTimings.stage` for that). An exception is recorded on the span and re-raised."""
    with _span(stage, attributes, None) as span:
        yield span


@contextmanager
def _span(
    stage: str, attributes: Mapping[str, AttributeValue], on_done: Callable[[float], None] | None
) -> Iterator[trace.Span]:
    """The span of one stage; its one measurement (ms) goes to the span's `duration_ms` and to `on_done`."""
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(f"rag.{stage}", attributes=attributes) as span:
        start = time.perf_counter()
        try:
            yield span
        finally:
            elapsed_ms = (time.perf_counter() - start) * 1000
            span.set_attribute("duration_ms", elapsed_ms)
            if on_done is not None:
                on_done(elapsed_ms)
