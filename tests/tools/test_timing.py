"""Stage timings (`tools.timing.StageTimings`): one measurement per stage, summed over repeats. Pure logic."""

from __future__ import annotations

import time

import pytest

from tools.timing import StageTimings


def test_stages_add_up_and_record_replaces() -> None:
    timings = StageTimings()
    timings.add({"embed": 0.0, "search": 0.0})
    for _ in range(2):
        with timings.stage("dense_search", key="search"):
            time.sleep(0.01)
    searched = timings.get("search")
    assert searched is not None and searched >= 20.0
    timings.add({"search": 5.0, "llm": 1.0})
    assert timings.get("search") == pytest.approx(searched + 5.0)
    timings.record("llm", 2.25)
    assert timings.as_dict(digits=1) == {"embed": 0.0, "search": round(searched + 5.0, 1), "llm": 2.2}
    assert list(timings.as_dict()) == ["embed", "search", "llm"] and timings.get("total") is None


def test_a_failed_stage_still_counts_its_time() -> None:
    timings = StageTimings()
    with pytest.raises(RuntimeError), timings.stage("embed"):
        time.sleep(0.01)
        raise RuntimeError("Triton is down")
    assert (timings.get("embed") or 0.0) >= 10.0
