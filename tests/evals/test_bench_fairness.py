"""`rag bench fairness`: a short run of the fair-share benchmark (no stack: the real HTTP app over in-memory answers
and keys) writes its JSON; the flooding key is held to its share of the queue and the steady key is answered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from evals.bench_fairness import FairnessBenchParams


def test_a_short_fairness_bench_refuses_the_flooder_its_excess_and_answers_the_steady_key(tmp_path: Path) -> None:
    out = tmp_path / "bench-fairness.json"
    args = ["bench", "fairness", "--flood-clients", "16", "--duration", "3", "--answer-s", "0.2", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    flood, steady = report["keys"]["flood"], report["keys"]["steady"]
    # 16 clients against 4 slots and 8 of the 16 queue places: the flooder's excess is refused for its share
    assert flood["outcomes"].get("overloaded:key_share", 0) > 0 and flood["outcomes"]["answered"] > 0
    # the steady key is never refused: there is always a queue place for it, and the next slot is its own
    assert steady["requests"] >= 2 and steady["outcomes"] == {"answered": steady["requests"]}
    assert report["steady_answered"] == 1.0 and report["met"] is True
    assert "steady key answered" in result.output


def test_the_bench_refuses_a_load_without_clients_or_time() -> None:
    with pytest.raises(ValueError, match="flood_clients=0"):
        FairnessBenchParams(flood_clients=0)
