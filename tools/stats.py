"""Latency summaries: the one home of the percentiles every benchmark, eval and client reports."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 95.0, 99.0)


def percentiles(values: Iterable[float], ps: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, float | int]:
    """Percentiles of `values` with their count, e.g. `{"p50": 4.1, "p95": 9.0, "p99": 12.3, "n": 812}`.

    numpy's `percentile(method="linear")` (type 7 of Hyndman and Fan, "Sample Quantiles in Statistical
    Packages", 1996): a percentile of one sample is that sample, never above the maximum. Units are the caller's
    (ms throughout the project). Empty input gives `{"n": 0}` and no percentiles.

    Raises:
        ValueError: a percentile outside 0..100.
    """
    data = np.fromiter(values, dtype=np.float64)
    if any(not 0 <= p <= 100 for p in ps):
        raise ValueError(f"percentiles {list(ps)}; expected values in 0..100")
    if data.size == 0:
        return {"n": 0}
    summary: dict[str, float | int] = {
        f"p{p:g}": float(v) for p, v in zip(ps, np.percentile(data, list(ps), method="linear"), strict=True)
    }
    summary["n"] = int(data.size)
    return summary
