"""The measured tables of README.md and the documentation pages agree with the stored results in evals/results/.
Pure logic, no server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evals.readme_tables import (
    README,
    RESULTS_DIR,
    TABLES,
    ReadmeTablesError,
    _busy,
    pages,
    read_pages,
    render_pages,
    stale_tables,
)


def test_the_tables_match_the_stored_results() -> None:
    texts = read_pages()
    assert README in texts and len(texts) > 1, "README.md and the docs/ pages"
    assert {page: stale_tables(text) for page, text in texts.items() if stale_tables(text)} == {}, (
        "run `python -m evals.readme_tables` and commit the pages"
    )
    assert render_pages(texts) == texts


def test_a_changed_result_makes_its_table_stale(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS_DIR, results, ignore=shutil.ignore_patterns("*.png"))
    bench = results / "bench-embedder.json"
    data = json.loads(bench.read_text())
    data["setups"]["triton_dynamic"]["rps"] = 999.9
    bench.write_text(json.dumps(data))
    text = "".join(read_pages().values())
    assert sorted(stale_tables(text, results)) == ["bench-embedder", "headline"]
    rendered = "".join(render_pages(read_pages(), results).values())
    assert "| triton_dynamic | 999.9 |" in rendered and "999.9 req/s, p99" in rendered


def test_markers_and_tables_correspond() -> None:
    texts = read_pages()
    with pytest.raises(ReadmeTablesError, match="names no table"):
        render_pages({**texts, README: "<!-- results:nope -->\n<!-- /results:nope -->\n" + texts[README]})
    first = next(iter(TABLES))
    without = {page: text.replace(f"<!-- results:{first} -->", "") for page, text in texts.items()}
    with pytest.raises(ReadmeTablesError, match=f"missing: \\['{first}'\\]"):
        render_pages(without)
    block = f"<!-- results:{first} -->\n<!-- /results:{first} -->\n"
    with pytest.raises(ReadmeTablesError, match=f"repeated: \\['{first}'\\]"):
        render_pages({**texts, README: texts[README] + block})


def test_the_pages_are_the_readme_and_every_docs_page(tmp_path: Path) -> None:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    for name in ("README.md", "docs/b.md", "docs/a.md", "docs/sub/c.md", "docs/notes.txt"):
        (tmp_path / name).write_text("x")
    assert [p.relative_to(tmp_path).as_posix() for p in pages(tmp_path)] == [
        "README.md",
        "docs/a.md",
        "docs/b.md",
        "docs/sub/c.md",
    ]


def test_a_run_on_a_busy_machine_says_so() -> None:
    assert _busy({"load_average_1m_at_start": 4.05, "cores": 2}) == "; busy machine, load 4.0 on 2 cores"
    assert _busy({"load_average_1m_at_start": 0.4, "cores": 2}) == ""
    assert _busy({"cores": 2}) == ""
