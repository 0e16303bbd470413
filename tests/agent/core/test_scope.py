"""`tools.scope.SearchScope` (filter grammar, CLI form, collections) and its SQL (`tools.store.filters.where_sql`),
and the CLI options that make one; no server. The SQL's meaning is proven against Postgres in test_store_filters.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.cli.main import cli_scope
from agent.core.errors import InputError
from tools.scope import ScopeError, SearchScope
from tools.store.filters import where_sql


def test_from_filter_reads_every_kind() -> None:
    scope = SearchScope.from_filter(
        {
            "team": "bio",
            "year": [2019, 2020],
            "source": "handbook.md",
            "ingested_after": "2026-01-01",
            "ingested_before": "2026-02-01T12:00:00+01:00",
        },
        ["papers"],
    )
    assert scope.collections == ("papers",)
    assert scope.metadata == {"team": ("bio",), "year": (2019, 2020)}
    assert scope.sources == ("handbook.md",)
    assert scope.ingested_after == datetime(2026, 1, 1, tzinfo=UTC)
    assert scope.ingested_before is not None and scope.ingested_before.utcoffset() is not None
    assert scope.has_filter and not scope.is_everything


@pytest.mark.parametrize(
    "spec",
    [
        {"team": "bio"},
        {"year": [2019, 2020], "flag": True, "score": 0.5},
        {"source": ["a.md", "b.md"], "ingested_after": "2026-01-01T00:00:00+00:00"},
        {},
    ],
)
def test_to_filter_round_trips(spec: dict[str, Any]) -> None:
    scope = SearchScope.from_filter(spec)
    assert SearchScope.from_filter(scope.to_filter()) == scope
    assert scope.to_filter() == spec


def test_from_cli_reads_json_values_and_repeats_as_set_membership() -> None:
    scope = SearchScope.from_cli(["year=2019", "year=2020", 'code="2019"', "team=bio", "source=123"], ["docs"])
    assert scope.metadata == {"year": (2019, 2020), "code": ("2019",), "team": ("bio",)}
    assert scope.sources == ("123",)  # a column key keeps the raw string
    assert scope.collections == ("docs",)
    assert SearchScope.from_filter(scope.to_filter(), ["docs"]) == scope


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"team": []}, "'team': empty list"),
        ({"team": {"nested": 1}}, "'team'"),
        ({"team": None}, "'team'"),
        ({"source": 5}, "'source'"),
        ({"ingested_after": "last tuesday"}, "'ingested_after'"),
        ({"ingested_before": 5}, "'ingested_before'"),
        ({"ingested_after": "2026-02-01", "ingested_before": "2026-01-01"}, "ingested_after"),
        ({"": 1}, "filter key"),
    ],
)
def test_bad_filters_raise_an_error_naming_the_key(spec: dict[str, Any], needle: str) -> None:
    with pytest.raises(ScopeError, match=re.escape(needle)):
        SearchScope.from_filter(spec)


def test_bad_cli_item_and_collection_name_the_input() -> None:
    with pytest.raises(ScopeError, match="--filter 'team'"):
        SearchScope.from_cli(["team"])
    with pytest.raises(ScopeError, match="collection 'Bad Name'"):
        SearchScope.from_cli([], ["Bad Name"])


def test_within_intersects_collections() -> None:
    assert SearchScope().within(["b", "a"]).collections == ("a", "b")
    assert SearchScope(collections=("a", "c")).within(["a", "b"]).collections == ("a",)
    assert SearchScope(collections=("c",)).within(["a"]).collections == ()
    assert SearchScope(collections=("c",)).within(None).collections == ("c",)


def test_where_sql_binds_every_value_as_a_parameter() -> None:
    hostile = "x'); DROP TABLE documents; --"
    scope = SearchScope.from_filter(
        {hostile: hostile, "source": hostile, "ingested_after": "2026-01-01"}, collections=["a"]
    )
    where = where_sql(scope, 3, {"group": 1})
    assert hostile not in where.sql and "DROP" not in where.sql
    assert re.findall(r"\$(\d+)", where.sql) == [str(n) for n in range(3, 3 + len(where.params))]
    assert where.params == (
        ["a"],
        json.dumps([hostile]),
        hostile,
        [hostile],
        datetime(2026, 1, 1, tzinfo=UTC),
        '{"group": 1}',
    )
    assert where.narrows


def test_where_sql_of_nothing_is_true_and_empty_collections_still_narrow() -> None:
    assert where_sql(None, 1) == where_sql(SearchScope(), 5)
    assert where_sql(None, 1).sql == "true" and not where_sql(None, 1).narrows
    nothing = where_sql(SearchScope(collections=()), 2)
    assert nothing.sql == "d.collection = ANY($2::text[])" and nothing.params == ([],) and nothing.narrows


def test_cli_options_make_the_scope_and_name_a_bad_item() -> None:
    assert cli_scope(None, None) is None
    assert cli_scope(["team=bio", "year=2019"], ["papers"]) == SearchScope.from_filter(
        {"team": "bio", "year": 2019}, ["papers"]
    )
    with pytest.raises(InputError, match="--filter 'team'"):
        cli_scope(["team"], None)


def test_rag_ask_reports_a_bad_filter_before_connecting(tmp_path: Path) -> None:
    env = os.environ | {"DATA_DIR": str(tmp_path), "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    result = subprocess.run(
        [sys.executable, "-m", "agent", "ask", "why?", "--filter", "year=2019", "--collection", "Bad Name"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: collection 'Bad Name'"), result.stderr
