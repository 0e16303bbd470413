"""Who is reading: `Access`, the groups whose documents a caller may read, and the roles groups are granted.

A document carries the groups allowed to read it (`documents.groups`, copied onto its chunks); a document ingested
without any carries `PUBLIC_GROUP`, which every caller is in. A caller's `Access` is its groups; the store enforces it
in Postgres with row-level security (`tools.store.access`): a read transaction of a restricted caller switches to the
reading role and sets its groups (`set_local_sql`), so a row whose groups do not meet the caller's is never returned,
whatever the statement's own filters say. `UNRESTRICTED` (the operator: the local CLI, the admin `API_KEY`, the Python
API) reads every row. Pure: no store or server here.

Group names come from an identity provider's token (`agent.core.oidc`), an API key tied to a group, or `rag access`;
they are any non-empty text of at most `MAX_GROUP_CHARS` characters without control characters (Keycloak's
`/engineering/platform` paths and Entra ID's object ids both fit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

PUBLIC_GROUP = "everyone"
"""The group every caller is in, and the groups of a document ingested without any."""

MAX_GROUP_CHARS = 256
"""The longest group name, characters."""

READER_ROLE = "rag_reader"
"""The Postgres role a restricted read transaction switches to (`SET LOCAL ROLE`); row-level security applies to it."""

GROUPS_SETTING = "rag.groups"
"""The custom Postgres setting that carries a transaction's caller groups (a `text[]` literal) to the policies."""


class AccessError(ValueError):
    """A group name or role that is not valid; the message names the input and what was expected."""


class Role(StrEnum):
    """What a group may do in a collection (`rag access grant`): each role includes the ones before it."""

    READER = "reader"
    """Search and ask over the collection's documents the caller's groups may read."""
    UPLOADER = "uploader"
    """Also add, replace and delete documents."""
    ADMIN = "admin"
    """Also change documents' groups and the collection's grants."""

    @property
    def rank(self) -> int:
        """0 reader, 1 uploader, 2 admin."""
        return list(Role).index(self)

    def includes(self, other: Role) -> bool:
        """Whether this role may do what `other` may."""
        return self.rank >= other.rank


def check_role(name: str) -> Role:
    """The `Role` named `name`.

    Raises:
        AccessError: not one of reader, uploader, admin (named).
    """
    try:
        return Role(name)
    except ValueError:
        raise AccessError(f"role {name!r}: expected one of {', '.join(r.value for r in Role)}") from None


def check_group(name: str) -> str:
    """`name` stripped, when it is a valid group name: 1-`MAX_GROUP_CHARS` characters, no control characters.

    Raises:
        AccessError: names the bad value and the expected form.
    """
    if not isinstance(name, str):
        raise AccessError(f"group {name!r}: expected text, got {type(name).__name__}")
    stripped = name.strip()
    if not stripped or len(stripped) > MAX_GROUP_CHARS or any(ord(ch) < 32 or ord(ch) == 127 for ch in stripped):
        raise AccessError(f"group {name!r}: expected 1-{MAX_GROUP_CHARS} characters without control characters")
    return stripped


def check_groups(names: Iterable[str]) -> tuple[str, ...]:
    """Valid, de-duplicated, sorted group names (`check_group` each); empty when none are given.

    Raises:
        AccessError: one name is not valid (named).
    """
    if isinstance(names, str):
        raise AccessError(f"groups {names!r}: expected a list of group names, got one string")
    return tuple(sorted({check_group(n) for n in names}))


def document_groups(names: Iterable[str] | None) -> tuple[str, ...]:
    """The groups stored on a document given `names` (None or empty: `PUBLIC_GROUP`, readable by every caller).

    Raises:
        AccessError: one name is not valid (named).
    """
    groups = check_groups(names or ())
    return groups or (PUBLIC_GROUP,)


def _text_array_literal(groups: Iterable[str]) -> str:
    """A Postgres `text[]` literal of `groups`, every element double-quoted with `"` and `\\` escaped."""
    items = ('"' + g.replace("\\", "\\\\").replace('"', '\\"') + '"' for g in groups)
    return "{" + ",".join(items) + "}"


@dataclass(frozen=True)
class Access:
    """The documents a caller may read: those whose groups meet `groups`.

    Attributes:
        groups: the caller's groups, `PUBLIC_GROUP` always among them; None: every document (`UNRESTRICTED`).
    """

    groups: frozenset[str] | None

    @property
    def unrestricted(self) -> bool:
        """True for the operator, who reads every document."""
        return self.groups is None

    def readable(self, document_groups: Iterable[str]) -> bool:
        """Whether a document carrying `document_groups` is readable (the rule the Postgres policies apply)."""
        return self.groups is None or not self.groups.isdisjoint(document_groups)

    @property
    def key(self) -> str:
        """A stable digest of the permission set for cache keys: `*` when unrestricted, else the first 32 hex
        characters of SHA-256 over the sorted groups joined by newlines."""
        if self.groups is None:
            return "*"
        return hashlib.sha256("\n".join(sorted(self.groups)).encode()).hexdigest()[:32]

    def set_local_sql(self) -> str:
        """The statements that start a restricted read transaction (after `BEGIN`): switch to `READER_ROLE` and set
        `GROUPS_SETTING`; empty for the unrestricted caller. The groups go in as a hex-encoded UTF-8 literal, so no
        group name can end the string.
        """
        if self.groups is None:
            return ""
        hex_literal = _text_array_literal(sorted(self.groups)).encode().hex()
        return (
            f"SET LOCAL ROLE {READER_ROLE}; "
            f"SELECT set_config('{GROUPS_SETTING}', convert_from('\\x{hex_literal}'::bytea, 'UTF8'), true);"
        )


UNRESTRICTED = Access(None)
"""The operator's access: every document (the local CLI, the admin `API_KEY`, the Python API)."""

NOBODY = Access(frozenset({PUBLIC_GROUP}))
"""A caller in no group of its own: the documents ingested without groups only."""


def caller_access(groups: Iterable[str]) -> Access:
    """The `Access` of a caller in `groups` (from a token, a key's group or a grant), `PUBLIC_GROUP` added.
    Invalid names are dropped, never widened (a token's claim is not ours to refuse).
    """
    kept = set()
    for name in groups:
        try:
            kept.add(check_group(name))
        except AccessError:
            continue
    return Access(frozenset(kept | {PUBLIC_GROUP}))


class GrantBook(Protocol):
    """The grants of groups to collections (`rag access grant`, the admin API), held in Postgres
    (`tools.store.grants`) or in memory."""

    async def roles_for(self, groups: Iterable[str]) -> Mapping[str, Role]:
        """Collection -> the highest role any of `groups` holds there; collections none of them is granted are absent.

        Raises:
            StoreError: the grants could not be read.
        """
        ...
