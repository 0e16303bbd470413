"""Which documents a search, an answer or a listing may see: `SearchScope` (collections and metadata filters).

One scope travels from every interface (HTTP `filter` / `collection`, CLI `--filter key=value` / `--collection`,
the MCP search tool, an API key's collections) through `agent.core.answer.AnswerRequest` and
`tools.retrieval.PassageSearch` to the store, which applies it in both search legs (dense and full text) and in
document reads. Pure: no store or server here.

Filter grammar (the same in JSON bodies and on the CLI):
- `source`: the document's `source` equals the value, or one of the values of a list;
- `ingested_after` / `ingested_before`: ISO 8601 timestamps; `ingested_at >= after` and `ingested_at < before`
  (a date without a time is midnight UTC; a time without an offset is UTC);
- any other key: the document's metadata value under that key equals the value (JSON equality: `2019` is not
  `"2019"`), or one of the values of a list (set membership).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from tools.access import UNRESTRICTED, Access

DEFAULT_COLLECTION = "default"
"""The collection of a document ingested without one."""

COLLECTION_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
"""A collection name: 1–63 characters of lower-case ASCII letters, digits, `_`, `.`, `-`, starting alphanumeric."""

RESERVED_FILTER_KEYS = ("source", "ingested_after", "ingested_before")
"""Filter keys that name document columns rather than metadata keys."""

Scalar = str | int | float | bool
"""A metadata value a filter compares with (JSON scalar)."""


class ScopeError(ValueError):
    """A collection name or filter that is not valid; the message names the input and what was expected."""


def check_collection(name: str) -> str:
    """`name` when it is a valid collection name (`COLLECTION_PATTERN`).

    Raises:
        ScopeError: names the bad value and the expected form.
    """
    if not isinstance(name, str) or not COLLECTION_PATTERN.match(name):
        raise ScopeError(
            f"collection {name!r}: expected 1-63 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
        )
    return name


def _scalar(key: str, value: Any) -> Scalar:
    if isinstance(value, bool | int | float | str) and not (isinstance(value, float) and value != value):
        return value
    raise ScopeError(f"filter {key!r}: value {value!r} is a {type(value).__name__}; expected a string, number or bool")


def _values(key: str, value: Any) -> tuple[Scalar, ...]:
    if isinstance(value, list | tuple):
        if not value:
            raise ScopeError(f"filter {key!r}: empty list; expected at least one value")
        return tuple(_scalar(key, v) for v in value)
    return (_scalar(key, value),)


def _timestamp(key: str, value: Any) -> datetime:
    if isinstance(value, datetime):
        stamp = value
    elif isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ScopeError(
                f"filter {key!r}: {value!r} is not an ISO 8601 date or timestamp; expected e.g. 2026-01-31 or "
                f"2026-01-31T12:00:00Z"
            ) from None
    else:
        raise ScopeError(f"filter {key!r}: {value!r}; expected an ISO 8601 date or timestamp string")
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


@dataclass(frozen=True)
class SearchScope:
    """What a search may see: the collections, and filters on the documents.

    Attributes:
        collections: the collections searched; None: every collection (the admin key, the local CLI).
        metadata: metadata key -> accepted values (one value: equality; several: set membership).
        sources: accepted `source` values; empty: any source.
        ingested_after: only documents with `ingested_at >= ingested_after` (aware datetime), or None.
        ingested_before: only documents with `ingested_at < ingested_before` (aware datetime), or None.
        access: whose reading this is (`tools.access`): the store runs the search's transaction under it, so only
            documents whose groups meet the caller's are seen (row-level security); `UNRESTRICTED`: every document.
    """

    collections: tuple[str, ...] | None = None
    metadata: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    ingested_after: datetime | None = None
    ingested_before: datetime | None = None
    access: Access = UNRESTRICTED

    def __post_init__(self) -> None:
        if self.collections is not None:
            for name in self.collections:
                check_collection(name)
        if self.ingested_after and self.ingested_before and self.ingested_after >= self.ingested_before:
            raise ScopeError(
                f"filter ingested_after={self.ingested_after.isoformat()} is not before "
                f"ingested_before={self.ingested_before.isoformat()}; expected after < before"
            )

    @property
    def has_filter(self) -> bool:
        """True when some filter (metadata, source, ingest time) narrows the search beyond collections."""
        return bool(self.metadata or self.sources or self.ingested_after or self.ingested_before)

    @property
    def is_everything(self) -> bool:
        """True when the scope narrows nothing (every collection, no filter)."""
        return self.collections is None and not self.has_filter

    def within(self, collections: Iterable[str] | None) -> SearchScope:
        """This scope restricted to `collections` (an API key's; None: no restriction): the intersection."""
        if collections is None:
            return self
        allowed = tuple(sorted(set(collections)))
        mine = allowed if self.collections is None else tuple(c for c in self.collections if c in allowed)
        return replace(self, collections=mine)

    def read_by(self, access: Access) -> SearchScope:
        """This scope read by a caller with `access` (`tools.access`)."""
        return replace(self, access=access)

    @classmethod
    def from_filter(cls, spec: Mapping[str, Any] | None, collections: Sequence[str] | None = None) -> SearchScope:
        """The scope of a JSON `filter` object (module docstring grammar) over `collections` (None: all).

        Raises:
            ScopeError: an invalid value; the message names the key.
        """
        spec = spec or {}
        if not isinstance(spec, Mapping):
            raise ScopeError(f"filter: {spec!r} is a {type(spec).__name__}; expected an object of key: value")
        metadata: dict[str, tuple[Scalar, ...]] = {}
        sources: tuple[str, ...] = ()
        after = before = None
        for key, value in spec.items():
            if not isinstance(key, str) or not key:
                raise ScopeError(f"filter key {key!r}: expected a non-empty string")
            if key == "source":
                found = _values(key, value)
                if not all(isinstance(v, str) for v in found):
                    raise ScopeError(f"filter 'source': {value!r}; expected a string or a list of strings")
                sources = tuple(str(v) for v in found)
            elif key == "ingested_after":
                after = _timestamp(key, value)
            elif key == "ingested_before":
                before = _timestamp(key, value)
            else:
                metadata[key] = _values(key, value)
        return cls(
            collections=None if collections is None else tuple(collections),
            metadata=metadata,
            sources=sources,
            ingested_after=after,
            ingested_before=before,
        )

    @classmethod
    def from_cli(cls, items: Sequence[str], collections: Sequence[str] | None = None) -> SearchScope:
        """The scope of repeated CLI `--filter key=value` options: a key given twice is set membership; a value is
        read as JSON when it parses (`year=2019` is the number, `year='"2019"'` the string), else as a string.

        Raises:
            ScopeError: an item without `=` or an invalid value.
        """
        spec: dict[str, list[Any]] = {}
        for item in items:
            key, sep, raw = item.partition("=")
            if not sep or not key.strip():
                raise ScopeError(f"--filter {item!r}: expected key=value, e.g. source=handbook.md or team=bio")
            try:
                value: Any = json.loads(raw)
            except json.JSONDecodeError:
                value = raw
            if key.strip() in RESERVED_FILTER_KEYS and not isinstance(value, str):
                value = raw
            spec.setdefault(key.strip(), []).append(value)
        flat = {k: (v[0] if len(v) == 1 else v) for k, v in spec.items()}
        return cls.from_filter(flat, collections)

    def to_filter(self) -> dict[str, Any]:
        """The JSON `filter` object of this scope (collections left out): `from_filter(s.to_filter())` equals the
        filters of `s`."""
        out: dict[str, Any] = {k: (v[0] if len(v) == 1 else list(v)) for k, v in self.metadata.items()}
        if self.sources:
            out["source"] = self.sources[0] if len(self.sources) == 1 else list(self.sources)
        if self.ingested_after:
            out["ingested_after"] = self.ingested_after.isoformat()
        if self.ingested_before:
            out["ingested_before"] = self.ingested_before.isoformat()
        return out


EVERYTHING = SearchScope()
"""The scope that narrows nothing."""


QUALIFIER = "::"
"""Separates a collection name from a doc id in a qualified doc id (`qualified_doc_id`)."""


def qualified_doc_id(collection: str, doc_id: str) -> str:
    """The name of document `doc_id` of `collection` that is unique across collections: the doc id itself in the
    default collection, `collection::doc_id` in any other. A default-collection doc id that already starts like a
    qualified one (`name::...`) is written `default::doc_id`, so the mapping is one-to-one (collection names hold
    no `:`). Chunk ids are `qualified_doc_id#chunk_index`: unique in the `chunks` table whatever the collections."""
    head, sep, _ = doc_id.partition(QUALIFIER)
    if collection == DEFAULT_COLLECTION and not (sep and COLLECTION_PATTERN.match(head)):
        return doc_id
    return f"{collection}{QUALIFIER}{doc_id}"


def collection_of(chunk: str, doc_id: str) -> str | None:
    """The collection of the stored chunk named `chunk` of document `doc_id`: the inverse of
    `tools.records.chunk_id` (`qualified_doc_id#index`); None when `chunk` is not a chunk id of `doc_id`."""
    qualified = chunk.rpartition("#")[0]
    if qualified == doc_id:
        return DEFAULT_COLLECTION
    head, sep, rest = qualified.partition(QUALIFIER)
    return head if sep and rest == doc_id and COLLECTION_PATTERN.match(head) else None
