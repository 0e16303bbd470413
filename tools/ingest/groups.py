"""The groups allowed to read ingested documents (`tools.access`), as ingestion sets them: the document metadata key
`groups` (consumed by the store at insert: `documents.groups`), a run's default (`rag ingest --groups`, `rag sync
--groups`, the upload field `groups`), and folder rules of `rag sync`: a file `.rag-groups` in a folder names the
groups of the documents in that folder and below, one group per line (lines starting with `#` are comments, blank
lines are skipped); the nearest such file wins, and an empty one makes its documents public (`PUBLIC_GROUP`).
Pure: reads `.rag-groups` files, no store here.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from tools.access import AccessError, check_groups
from tools.ingest.documents import IngestError, SourceDocument

GROUPS_KEY = "groups"
"""The document metadata key that carries a document's groups to the store."""

RULES_FILE = ".rag-groups"
"""The name of a folder's groups file (`rag sync`)."""

MAX_RULES_BYTES = 64 * 1024
"""A larger `.rag-groups` file fails the sync (it names groups, one per line)."""


def with_groups(document: SourceDocument, groups: Sequence[str] | None) -> SourceDocument:
    """`document` with its metadata `groups` set to `groups`; None: `document` as it is (its own metadata decides).
    An empty `groups` sets none: the document is public."""
    if groups is None:
        return document
    return replace(document, metadata={**document.metadata, GROUPS_KEY: list(groups)})


def parse_rules(text: str, where: str = RULES_FILE) -> tuple[str, ...]:
    """The groups a `.rag-groups` file names: one per line, `#` comment lines and blank lines skipped; valid,
    distinct, sorted.

    Raises:
        IngestError: an invalid group name (names `where` and the line).
    """
    groups: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        try:
            groups.extend(check_groups([name]))
        except AccessError as exc:
            raise IngestError(f"{where}:{number}: {exc}") from None
    return tuple(sorted(set(groups)))


@dataclass(frozen=True)
class GroupRules:
    """The `.rag-groups` files of a synced folder and the run's default.

    Attributes:
        rules: folder relative to the synced folder (POSIX, `""` for the folder itself) -> the groups its file names.
        default: the groups of documents no file covers (`rag sync --groups`); None: those documents carry none of
            their own (public).
    """

    rules: Mapping[str, tuple[str, ...]]
    default: tuple[str, ...] | None = None

    @classmethod
    def scan(cls, folder: Path, default: Sequence[str] | None = None) -> GroupRules:
        """The rules of `folder` and its subfolders (hidden folders left out, as the sync leaves them out).

        Raises:
            IngestError: a `.rag-groups` file that cannot be read, is over `MAX_RULES_BYTES`, or names an invalid
                group (named).
        """
        rules: dict[str, tuple[str, ...]] = {}
        for here, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if RULES_FILE not in files:
                continue
            path = Path(here) / RULES_FILE
            try:
                if path.stat().st_size > MAX_RULES_BYTES:
                    raise IngestError(f"{path}: over {MAX_RULES_BYTES} bytes; expected one group name per line")
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise IngestError(f"{path}: cannot be read ({exc})") from None
            rel = Path(here).relative_to(folder).as_posix()
            rules["" if rel == "." else rel] = parse_rules(text, str(path))
        return cls(rules, None if default is None else check_default(default))

    def groups_for(self, rel_path: str) -> tuple[str, ...] | None:
        """The groups of the file at `rel_path` (relative to the synced folder): those of the nearest `.rag-groups`
        at or above its folder, else the default (None: no groups of its own)."""
        parent = PurePosixPath(rel_path).parent
        for folder in (parent, *parent.parents):
            key = "" if str(folder) == "." else folder.as_posix()
            if key in self.rules:
                return self.rules[key]
        return self.default

    @property
    def active(self) -> bool:
        """Whether any document's groups come from these rules."""
        return bool(self.rules) or self.default is not None

    @property
    def fingerprint(self) -> str:
        """sha256 hex of the rules and the default: a change of either changes it."""
        payload = {"rules": dict(sorted(self.rules.items())), "default": self.default}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def check_default(groups: Sequence[str]) -> tuple[str, ...]:
    """A run's default groups, valid, distinct, sorted.

    Raises:
        IngestError: an invalid group name (named).
    """
    try:
        return check_groups(groups)
    except AccessError as exc:
        raise IngestError(f"groups: {exc}") from None


NO_RULES = GroupRules({})
"""No `.rag-groups` file and no default: documents carry no groups of their own."""
