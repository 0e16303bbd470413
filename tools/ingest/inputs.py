"""Which files a run reads and how their documents are named.

Arguments are files or folders; folders are walked recursively in name order (entries whose name starts with `.`
are left out), keeping files that match an `--include` glob (all when none) and no `--exclude` glob. Globs are
matched against the path relative to the folder walked, from the right (`*.pdf`, `drafts/*`, `a/**/b.md` as
`fnmatch`). Each file's type is sniffed from its content (`tools.extract.sniff`).

Document ids are unique and stable: a document file's id is its path relative to the ingest root (POSIX separators,
suffix kept, e.g. `a/handbook.md`; Unicode NFC, so a name saved in NFD by another system is the same document), a
`.jsonl` record keeps its `_id`; both get an optional prefix. Two inputs with the same id in one run are refused
before anything is stored, naming both.
"""

from __future__ import annotations

import fnmatch
import os
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tools.extract import DOCUMENT_KINDS, DOCUMENT_SUFFIXES, Kind, sniff
from tools.extract.formats import FORMAT_NAMES, is_paged, is_structured
from tools.ingest.documents import IngestError

TEMPORARY_NAMES = ("*~", "#*#", ".#*", "~$*", "*.part", "*.crdownload", "*.swp", "*.tmp")
"""File name globs of editors' backups and autosaves (`notes.md~`, `#notes.md#`), lock files (Emacs `.#notes.md`,
Word's `~$report.docx`), partial downloads (`.part`, `.crdownload`) and temporary files: not documents, or not yet
(a folder sync leaves them out unless an `--include` glob names them: `SYNC_IGNORE`)."""


@dataclass(frozen=True)
class InputFile:
    """One input file and how its documents are named.

    Attributes:
        path: the file.
        doc_id: the id of its one document; None for JSONL, whose records carry `_id`.
        prefix: prepended to every `_id` of a JSONL file (already part of `doc_id` otherwise).
        kind: the type sniffed from its content.
    """

    path: Path
    doc_id: str | None
    prefix: str = ""
    kind: Kind = "text"

    @property
    def supported(self) -> bool:
        """A document type, or content that claims one by its name (refused later with the cause)."""
        return self.kind in DOCUMENT_KINDS or self.path.suffix.lower() in DOCUMENT_SUFFIXES

    @property
    def structured(self) -> bool:
        """Its extractor finds a title and structure (`tools.extract.formats.Format.structured`)."""
        return is_structured(self.kind)

    @property
    def paged(self) -> bool:
        """Its document has pages, counted with the run's extraction time (`Format.paged`)."""
        return is_paged(self.kind)


def printable(path: Path | str) -> str:
    """`path` as text that can always be printed and stored: bytes of a file name that are not UTF-8 (which Python
    keeps as lone surrogates) written as `\\xe9` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def name_error(path: Path | str) -> str | None:
    """Why the file `path` cannot be a document (its name is not valid UTF-8: it cannot be stored or shown), or
    None."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return f"{printable(path)}: the file name is not valid UTF-8 (Latin-1?); rename it"
    return None


def _matches(relative: str, patterns: Sequence[str]) -> bool:
    pure = PurePosixPath(relative)
    return any(pure.match(p) or fnmatch.fnmatch(relative, p) for p in patterns)


@dataclass
class Listing:
    """What walking a folder found (`walk_folder`): the files kept by the globs, the folders that could not be listed
    (with the error: permissions, I/O) and the folders that hold no entry at all (an unmounted mount point looks like
    one). Paths are under the folder walked, the folder itself included."""

    files: list[Path] = field(default_factory=list)
    unlisted: list[tuple[Path, OSError]] = field(default_factory=list)
    empty: list[Path] = field(default_factory=list)


def walk_folder(
    folder: Path, include: Sequence[str] = (), exclude: Sequence[str] = (), ignore: Sequence[str] = ()
) -> Listing:
    """Files under `folder`, recursively, in name order, filtered by the globs (see the module docstring), and the
    folders that could not be listed or were empty. A file whose name matches an `ignore` glob (`TEMPORARY_NAMES`)
    is left out unless an `include` glob matches it."""
    listing = Listing()

    def unlisted(error: OSError) -> None:
        listing.unlisted.append((Path(error.filename) if error.filename else folder, error))

    for top, dirs, files in os.walk(folder, onerror=unlisted):
        if not dirs and not files:
            listing.empty.append(Path(top))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(top) / name
            relative = path.relative_to(folder).as_posix()
            included = _matches(relative, include)
            if include and not included:
                continue
            if exclude and _matches(relative, exclude):
                continue
            if not included and any(fnmatch.fnmatchcase(name, p) for p in ignore):
                continue
            listing.files.append(path)
    return listing


def walk(folder: Path, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[Path]:
    """The files of `walk_folder`."""
    return walk_folder(folder, include, exclude).files


def expand(paths: Sequence[Path], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[Path]:
    """The files named by `paths`: a file as given, a folder walked (`walk`).

    Raises:
        IngestError: no paths, or a path that does not exist.
    """
    if not paths:
        raise IngestError(f"no input paths given; expected files or folders of {FORMAT_NAMES}")
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += walk(path, include, exclude)
        elif path.is_file():
            files.append(path)
        else:
            raise IngestError(f"{path}: no such file or folder")
    return files


def check_paths(paths: list[Path]) -> None:
    """Validate input files before anything is read or stored.

    Raises:
        IngestError: a path is missing or not a readable file.
    """
    for path in paths:
        if not path.is_file():
            raise IngestError(f"{path}: no such file")
        try:
            with path.open("rb") as handle:
                handle.read(1)
        except OSError as exc:
            raise IngestError(f"{path}: cannot be read ({exc.strerror})") from exc


def default_root(paths: Iterable[Path]) -> Path:
    """The current directory when every input lies under it, else the inputs' common parent directory."""
    resolved = [p.resolve() for p in paths]
    cwd = Path.cwd().resolve()
    if all(p.is_relative_to(cwd) for p in resolved):
        return cwd
    return Path(os.path.commonpath([str(p.parent) for p in resolved]))


def plan_inputs(
    paths: list[Path],
    root: Path | None = None,
    prefix: str = "",
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> list[InputFile]:
    """Find the input files, sniff their types and name their documents.

    Args:
        paths: files and folders (walked recursively).
        root: ids of document files are their paths relative to this directory (default `default_root`).
        prefix: prepended to every document id (e.g. `handbook/`).
        include, exclude: globs filtering the files found in folders.

    Returns:
        One `InputFile` per file, in order; files of an unsupported type are included (`supported` False) so
        that the run can list them as skipped.

    Raises:
        IngestError: a missing path, an unreadable file, a file outside `root`, the same file given twice, or two
            files that would get the same document id (names both).
    """
    files = expand(paths, include, exclude)
    check_paths(files)
    base = (root or default_root(paths)).resolve()
    seen: dict[str, Path] = {}
    given: dict[Path, Path] = {}
    inputs = []
    for path in files:
        resolved = path.resolve()
        if resolved in given:
            raise IngestError(f"{path}: given twice (also as {given[resolved]}); expected each input once")
        given[resolved] = path
        try:
            kind = sniff(path)
        except OSError as exc:
            raise IngestError(f"{path}: cannot be read ({exc.strerror})") from exc
        if kind == "jsonl":
            inputs.append(InputFile(path, None, prefix, kind))
            continue
        if not resolved.is_relative_to(base):
            raise IngestError(f"{path}: outside the ingest root {base}; pass --root with a directory holding it")
        doc_id = unicodedata.normalize("NFC", prefix + resolved.relative_to(base).as_posix())
        if doc_id in seen:
            raise IngestError(f"{seen[doc_id]} and {path} both get document id {doc_id!r}; pass distinct --prefix")
        seen[doc_id] = path
        inputs.append(InputFile(path, doc_id, kind=kind))
    return inputs
