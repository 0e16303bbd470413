"""`rag bench quota`: a tiny run of the refusal benchmark (no stack: the real HTTP app over in-memory answers, keys and
usage) writes its JSON, every phase's refusals made no LLM call."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agent.cli import app


def test_a_tiny_quota_bench_writes_every_phase_and_makes_no_llm_call(tmp_path: Path) -> None:
    out = tmp_path / "bench-quota.json"
    result = CliRunner().invoke(app, ["bench", "quota", "--requests", "16", "--warmup", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    results = json.loads(out.read_text())
    assert results["llm_calls_during_refusals"] == 0
    phases = {(p["limit"], p["path"], p["clients"]) for p in results["phases"]}
    assert len(phases) == 8 and all(p["ms"]["n"] == 16 for p in results["phases"])
    assert "worst p95" in result.output
