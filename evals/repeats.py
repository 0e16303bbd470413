"""Figures that hold on a shared machine: each point measured several times, the setups alternating, reported as
the median with its spread, and a figure judged against its target by all its runs.

Pure functions, used by `rag bench embedder` and `rag bench query`:

- `rotation(items, round_index)`: the order of the setups in one round (each round starts one later, so no setup
  always runs first, after the same neighbour, or at the same time of a drifting load);
- `spread(values)`: median, low, high and relative spread of the runs of one figure;
- `verdict(values, target)`: `met` (every run meets the target), `not met` (none does) or `spread crosses target`
  (some runs do and some do not: the figure cannot be called either way on this machine).
"""

from __future__ import annotations

import operator
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

T = TypeVar("T")

Verdict = Literal["met", "not met", "spread crosses target"]

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
_TARGET = re.compile(r"^\s*(>=|<=|>|<)\s*(-?[0-9]+(?:\.[0-9]+)?)\s*$")


def rotation(items: Sequence[T], round_index: int) -> list[T]:
    """`items` rotated left by `round_index` (mod their count): round 0 keeps the order, round 1 starts at the second.

    Examples:
        `rotation(["a", "b", "c"], 1) == ["b", "c", "a"]`; an empty sequence gives `[]`.
    """
    if not items:
        return []
    k = round_index % len(items)
    return [*items[k:], *items[:k]]


@dataclass(frozen=True)
class Spread:
    """The runs of one figure.

    Attributes:
        median: the median of the runs (statistics.median: the mean of the middle two for an even count).
        low, high: the smallest and largest run.
        relative: (high - low) / median (0.0 when the median is 0).
        values: the runs, in the order measured.
    """

    median: float
    low: float
    high: float
    relative: float
    values: tuple[float, ...]

    def as_dict(self, digits: int = 3) -> dict[str, object]:
        """`{"median", "low", "high", "relative", "values"}`, rounded to `digits` decimals."""
        return {
            "median": round(self.median, digits),
            "low": round(self.low, digits),
            "high": round(self.high, digits),
            "relative": round(self.relative, 3),
            "values": [round(v, digits) for v in self.values],
        }

    def text(self, digits: int = 2) -> str:
        """`median (low–high)`, e.g. `0.61 (0.55–0.70)`; one run gives the value alone."""
        if len(self.values) == 1:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}–{self.high:.{digits}f})"


def spread(values: Sequence[float]) -> Spread:
    """The median and range of `values`.

    Raises:
        ValueError: `values` is empty.
    """
    if not values:
        raise ValueError("spread of no runs")
    median = float(statistics.median(values))
    low, high = float(min(values)), float(max(values))
    relative = (high - low) / abs(median) if median else 0.0
    return Spread(median, low, high, relative, tuple(float(v) for v in values))


def parse_target(target: str) -> tuple[Callable[[float, float], bool], float]:
    """A target such as `">= 0.85"` or `"< 100"` as (comparison, threshold).

    Raises:
        ValueError: not an operator (>=, <=, >, <) followed by a number.
    """
    match = _TARGET.match(target)
    if match is None:
        raise ValueError(f"target {target!r}; expected an operator (>=, <=, >, <) and a number, e.g. '>= 0.85'")
    return _OPERATORS[match.group(1)], float(match.group(2))


def verdict(values: Sequence[float], target: str) -> Verdict:
    """Whether the runs `values` of a figure meet `target` (`parse_target`): all of them, none, or some.

    Raises:
        ValueError: no runs, or an unreadable target.
    """
    if not values:
        raise ValueError("verdict of no runs")
    compare, threshold = parse_target(target)
    hits = sum(1 for v in values if compare(v, threshold))
    if hits == len(values):
        return "met"
    if hits == 0:
        return "not met"
    return "spread crosses target"


def judged(values: Sequence[float], target: str | None, digits: int = 3) -> dict[str, object]:
    """A figure's report entry: `{"value": median, "spread": Spread.as_dict, "target", "verdict"}`.

    `verdict` is None without a target; an empty `values` gives value None and no spread.
    """
    if not values:
        return {"value": None, "spread": None, "target": target, "verdict": None}
    summary = spread(values)
    return {
        "value": round(summary.median, digits),
        "spread": summary.as_dict(digits),
        "target": target,
        "verdict": verdict(values, target) if target else None,
    }
