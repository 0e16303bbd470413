"""The README's measured tables agree with the stored results in evals/results/. Pure logic, no server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evals.readme_tables import README, RESULTS_DIR, TABLES, ReadmeTablesError, render_readme, stale_tables


def test_readme_tables_match_the_stored_results() -> None:
    text = README.read_text()
    assert stale_tables(text) == [], "run `python -m evals.readme_tables` and commit README.md"
    assert render_readme(text) == text


def test_a_changed_result_makes_its_table_stale(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS_DIR, results, ignore=shutil.ignore_patterns("*.png"))
    bench = results / "bench-embedder.json"
    data = json.loads(bench.read_text())
    data["setups"]["triton_dynamic"]["rps"] = 999.9
    bench.write_text(json.dumps(data))
    text = README.read_text()
    assert stale_tables(text, results) == ["bench-embedder"]
    assert "| triton_dynamic | 999.9 |" in render_readme(text, results)


def test_markers_and_tables_correspond() -> None:
    with pytest.raises(ReadmeTablesError, match="names no table"):
        render_readme("<!-- results:nope -->\n<!-- /results:nope -->\n" + README.read_text())
    first = next(iter(TABLES))
    without = README.read_text().replace(f"<!-- results:{first} -->", "").replace(f"<!-- /results:{first} -->", "")
    with pytest.raises(ReadmeTablesError, match=f"missing: \\['{first}'\\]"):
        render_readme(without)
