"""Repeated benchmark runs: the rotation of setups per round, the median with its spread, and the verdict of a
figure against its target when its runs fall on both sides."""

from __future__ import annotations

import pytest

from evals.repeats import judged, parse_target, rotation, spread, verdict


def test_each_round_starts_with_the_next_setup_and_every_setup_leads_once() -> None:
    setups = ["dynamic", "no_batching", "naive"]
    rounds = [rotation(setups, r) for r in range(3)]
    assert rounds == [
        ["dynamic", "no_batching", "naive"],
        ["no_batching", "naive", "dynamic"],
        ["naive", "dynamic", "no_batching"],
    ]
    assert rotation(setups, 3) == setups and rotation([], 5) == []


def test_spread_is_the_median_with_the_smallest_and_largest_run() -> None:
    summary = spread([0.5, 0.9, 0.6])
    assert (summary.median, summary.low, summary.high) == (0.6, 0.5, 0.9)
    assert summary.relative == pytest.approx(0.4 / 0.6)
    assert summary.values == (0.5, 0.9, 0.6)
    assert summary.text() == "0.60 (0.50–0.90)"
    assert spread([2.0, 4.0]).median == 3.0
    assert spread([7.0]).text(1) == "7.0"
    with pytest.raises(ValueError, match="no runs"):
        spread([])


@pytest.mark.parametrize(
    ("values", "target", "expected"),
    [
        ([0.9, 0.95, 0.88], ">= 0.85", "met"),
        ([0.5, 0.6, 0.7], ">= 0.85", "not met"),
        ([0.8, 0.9, 0.86], ">= 0.85", "spread crosses target"),
        ([80.0, 99.9], "< 100", "met"),
        ([80.0, 100.0], "< 100", "spread crosses target"),
        ([1.2, 1.2], "> 1.2", "not met"),
        ([1.15], "<= 1.15", "met"),
    ],
)
def test_a_figure_meets_its_target_only_when_every_run_does(values: list[float], target: str, expected: str) -> None:
    assert verdict(values, target) == expected


def test_a_target_is_an_operator_and_a_number() -> None:
    compare, threshold = parse_target(" >= 3 ")
    assert threshold == 3.0 and compare(3.0, threshold) and not compare(2.99, threshold)
    for bad in ("3", "== 3", ">= x", ""):
        with pytest.raises(ValueError, match="expected an operator"):
            parse_target(bad)


def test_a_judged_figure_carries_its_median_spread_target_and_verdict() -> None:
    entry = judged([0.31, 0.57, 0.44], ">= 0.85")
    assert entry["value"] == 0.44 and entry["verdict"] == "not met" and entry["target"] == ">= 0.85"
    assert entry["spread"] == {
        "median": 0.44,
        "low": 0.31,
        "high": 0.57,
        "relative": 0.591,
        "values": [0.31, 0.57, 0.44],
    }
    assert judged([1.3], None)["verdict"] is None
    assert judged([], ">= 1") == {"value": None, "spread": None, "target": ">= 1", "verdict": None}
