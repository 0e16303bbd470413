"""A `tools.scope.SearchScope` compiled to a parameterised SQL condition on the `documents` row `d`: pure, no
connection. Every value travels as a bind parameter (`$n`), never inside the SQL text, so a filter value cannot
change the statement.

Conditions (joined by AND; an empty scope compiles to the condition `true`):

- collections: `d.collection = ANY($n::text[])` (an empty tuple of collections matches nothing);
- each metadata key: `$v::jsonb @> jsonb_build_array(d.metadata -> $k::text)` with `$v` the JSON array of accepted
  values: JSON equality with one of them (`2019` is not `"2019"`; a document without the key never matches; an
  array-valued metadata entry never equals a scalar);
- sources: `d.source = ANY($n::text[])`;
- `ingested_after`: `d.ingested_at >= $n::timestamptz`; `ingested_before`: `d.ingested_at < $n::timestamptz`;
- a legacy containment object (`VectorStore.dense_search(metadata_filter=...)`): `d.metadata @> $n::jsonb`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tools.scope import SearchScope


@dataclass(frozen=True)
class Where:
    """A compiled condition: `sql` references parameters `$first..$(first + len(params) - 1)`; `params` are their
    values, in order (lists of str, JSON text, aware datetimes)."""

    sql: str
    params: tuple[Any, ...]

    @property
    def narrows(self) -> bool:
        """True when the condition can exclude a document (it is not the bare `true`)."""
        return bool(self.params)


def where_sql(scope: SearchScope | None, first_param: int, contains: Mapping[str, Any] | None = None) -> Where:
    """The condition on `documents d` of `scope` (None: everything) and, when given, the containment object
    `contains` (`d.metadata @> contains`), its parameters numbered from `first_param`.

    Args:
        scope: what a search may see.
        first_param: the number of the first bind parameter the condition uses (the statement's own come before).
        contains: a JSON object the document's metadata must contain (`@>`), or None.

    Returns:
        `Where("true", ())` when nothing narrows, else the AND of the conditions in the module docstring.
    """
    parts: list[str] = []
    params: list[Any] = []

    def param(value: Any, cast: str) -> str:
        params.append(value)
        return f"${first_param + len(params) - 1}::{cast}"

    if scope is not None:
        if scope.collections is not None:
            parts.append(f"d.collection = ANY({param(list(scope.collections), 'text[]')})")
        for key, values in scope.metadata.items():
            accepted = param(json.dumps(list(values)), "jsonb")
            parts.append(f"{accepted} @> jsonb_build_array(d.metadata -> {param(key, 'text')})")
        if scope.sources:
            parts.append(f"d.source = ANY({param(list(scope.sources), 'text[]')})")
        if scope.ingested_after is not None:
            parts.append(f"d.ingested_at >= {param(scope.ingested_after, 'timestamptz')}")
        if scope.ingested_before is not None:
            parts.append(f"d.ingested_at < {param(scope.ingested_before, 'timestamptz')}")
    if contains is not None:
        parts.append(f"d.metadata @> {param(json.dumps(dict(contains)), 'jsonb')}")
    return Where(" AND ".join(parts) or "true", tuple(params))
