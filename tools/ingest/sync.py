"""`rag sync`: make a collection's documents of one folder converge to the folder, incrementally.

The folder is scanned and compared with the state recorded by the last sync (`tools.ingest.sync_plan`: stat first,
bytes hashed only when the stat changed), then each change is applied, each file in its own transaction that also
records its state (the `tools.ingest.ports.SyncLedger`, e.g. `tools.store.sync_state.PostgresSyncLedger`), in this
order: moves, removals, additions and updates (read and embedded `batch_docs` files at a time, one embed call per
batch), recorded stats. So an interrupted sync keeps
what it finished and a re-run completes the rest; a run with nothing changed reads no file and writes nothing.

- New and changed files are read as `rag ingest` reads them (`tools.ingest.readers`; document id: `prefix` + the path
  relative to `root`, `source`: the absolute path). A changed file's chunks whose text the stored version holds keep
  their stored vector (`tools.ingest.reuse`): only changed chunks are embedded. A document over `LARGE_DOC_CHARS` is
  staged as in `rag ingest` (`tools.ingest.staging`, no reuse) and its state recorded after it.
- A renamed file (a path gone and a new one with the same bytes, in one run) moves its document: the document row,
  its chunks and vectors are kept and its doc id, chunk ids and `source` updated, with no embedding. Where the
  document's content names its file (a text or Markdown file without a heading takes its title from the file name),
  the new version replaces it with every unchanged chunk's vector reused (typically one chunk embedded). A file
  whose doc id changed (another `prefix` or `root`) with new bytes is written under its new id and the document its
  state owned is removed in the same transaction, its vectors lent to the unchanged chunks.
- A file gone from the folder removes the document this source recorded for it, and only such documents
  (`tools.store.sync_state`). A document already stored under a file's id (e.g. by `rag ingest` of the same folder)
  is that file's document: taken over (same content) or replaced, then kept in step with the file and removed with
  it. Documents under other ids are never touched.
- A file that cannot be read or extracted fails alone (listed with the cause) and its stored document is kept; a file
  of a type that is not synced (unsupported, a JSONL corpus: use `rag ingest`) is listed as skipped.
- The groups allowed to read each document (`tools.ingest.groups`): a `.rag-groups` file in a folder names them for
  the documents in that folder and below (the nearest file wins), `SyncRequest.groups` for the documents no file
  covers; written documents carry them (metadata `groups`). When the rules or the default change, the next run sets
  the groups of the documents it does not write (`set_document_groups`: no re-embedding) and records the rules'
  fingerprint in the ledger (path `.rag-groups`).
- `originals`: when given, each added or updated file is kept as its document's original, moved on a rename and
  removed with its document (a `tools.ingest.ports.KeptOriginals`: `tools.originals.Originals`).

The sync takes its ports (`tools.ingest.ports`): the embedder, the chunk sink, the ledger and the originals, so its
logic runs over the in-memory doubles as over Triton, Postgres and the file system.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from tools.extract import Kind
from tools.ingest.documents import IngestError, SourceDocument
from tools.ingest.embedding import prepare
from tools.ingest.groups import NO_RULES, RULES_FILE, GroupRules, with_groups
from tools.ingest.inputs import InputFile, printable
from tools.ingest.ports import (
    ChunkSink,
    DocumentEmbedder,
    IngestOptions,
    KeptOriginals,
    SyncLedger,
    document_groups_port,
)
from tools.ingest.readers import read_file_document
from tools.ingest.report import FileError, ProgressFn
from tools.ingest.staging import LARGE_DOC_CHARS, ingest_large
from tools.ingest.sync_plan import (
    RACY_WINDOW_NS,
    Candidate,
    SyncPlan,
    SyncReport,
    file_hash_and_kind,
    plan_sync,
    relative_id,
    scan_folder,
    settle,
)
from tools.model_specs import EmbeddingModelSpec
from tools.records import FileState, TextKind
from tools.scope import DEFAULT_COLLECTION, ScopeError, check_collection

log = logging.getLogger(__name__)

RULES_STATE = RULES_FILE
"""The ledger path under which a source's groups rules are recorded (their fingerprint as the `file_hash`): a file
named so is hidden, never synced, so no file's state takes that path."""

NAMED_KINDS: frozenset[Kind] = frozenset({"text", "markdown"})
"""Kinds whose document may take its title from the file name (read again on a rename)."""


@dataclass(frozen=True)
class SyncRequest:
    """One folder to sync and how its documents are named.

    Attributes:
        folder: the folder (walked recursively; hidden entries left out).
        collection: where its documents go (`tools.scope.check_collection`).
        root: document ids are paths relative to this folder (default: `folder`); it must hold `folder`.
        prefix: prepended to every document id.
        include, exclude: globs filtering the files (`tools.ingest.inputs.walk`).
        groups: the groups of the documents no `.rag-groups` file covers (`tools.ingest.groups`); None: none of
            their own (public).
    """

    folder: Path
    collection: str = DEFAULT_COLLECTION
    root: Path | None = None
    prefix: str = ""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    groups: tuple[str, ...] | None = None

    def checked(self) -> tuple[Path, Path]:
        """The folder and root, absolute.

        Raises:
            IngestError: the folder is missing or not a folder, the root does not hold it, or the collection name is
                invalid.
        """
        try:
            check_collection(self.collection)
        except ScopeError as exc:
            raise IngestError(str(exc)) from None
        folder = self.folder.resolve()
        if not folder.is_dir():
            raise IngestError(f"{self.folder}: no such folder; `rag sync` takes one folder")
        root = (self.root or self.folder).resolve()
        if not folder.is_relative_to(root):
            raise IngestError(f"{self.folder} is not under the root {root}; pass --root with a folder holding it")
        return folder, root


def within_roots(path: Path, roots: Sequence[Path]) -> Path | None:
    """`path` resolved (symbolic links followed) when it is absolute and inside one of `roots` (resolved too), else
    None: the check of a folder a sync job may sync (`SYNC_ROOTS`), made when it is queued and again when it runs."""
    if not path.is_absolute() or "\x00" in str(path):
        return None
    folder = path.resolve()
    return folder if any(folder.is_relative_to(Path(r).expanduser().resolve()) for r in roots) else None


class CountingEmbedder:
    """A `DocumentEmbedder` that counts the calls and the texts it passes on (the sync report's figures)."""

    def __init__(self, inner: DocumentEmbedder) -> None:
        self.inner = inner
        self.calls = 0
        self.texts = 0

    @property
    def spec(self) -> EmbeddingModelSpec:
        """The wrapped embedder's model facts."""
        return self.inner.spec

    @property
    def tokenizer(self) -> Tokenizer:
        """The wrapped embedder's tokenizer."""
        return self.inner.tokenizer

    async def embed(self, texts: Sequence[str], kind: TextKind = "document") -> npt.NDArray[np.float32]:
        """The wrapped embedder's embeddings, counted."""
        self.calls += 1
        self.texts += len(texts)
        return await self.inner.embed(texts, kind)


async def plan_folder(
    request: SyncRequest, ledger: SyncLedger, options: IngestOptions
) -> tuple[SyncPlan, int | None, Path, Path, dict[str, FileState]]:
    """Scan the folder (leaving out `options.ignore` names, waiting up to `options.settle_s` for files being written)
    and plan the sync against the recorded state (nothing is written).

    Returns:
        (the plan, the source's id or None when never synced, the folder, the root, the recorded states).
    """
    folder, root = request.checked()
    source = await ledger.find_source(str(folder), request.collection)
    recorded = await ledger.files(source.id) if source is not None else {}
    groups_state = recorded.pop(RULES_STATE, None)  # the folder's groups rules, recorded as no file of its own
    doc_id_of = relative_id(folder, root, request.prefix)
    racy_since_ns = time.time_ns() - RACY_WINDOW_NS  # a file modified since may change again unseen: read next time

    def scan() -> SyncPlan:
        scanned = scan_folder(folder, request.include, request.exclude, options.ignore)
        files, moving = settle(scanned.files, options.settle_s)
        pending = [f.rel_path for f in moving]
        plan = plan_sync(
            files, recorded, doc_id_of, file_hash_and_kind, racy_since_ns, scanned.unreadable, scanned.empty, pending
        )
        plan.outside = scanned.outside
        plan.groups_state = groups_state
        return plan

    plan = await asyncio.to_thread(scan)
    return plan, source.id if source is not None else None, folder, root, recorded


def _synced(candidate: Candidate) -> str | None:
    """Why a file is not synced (its type), or None."""
    if candidate.kind == "jsonl":
        return f"{candidate.seen.path}: a JSONL corpus holds many documents; it is not synced (use `rag ingest`)"
    if not InputFile(candidate.seen.path, candidate.doc_id, kind=candidate.kind).supported:
        return f"{candidate.seen.path}: unsupported type, skipped"
    return None


async def sync_folder(
    request: SyncRequest,
    embedder: DocumentEmbedder,
    store: ChunkSink,
    ledger: SyncLedger,
    options: IngestOptions,
    *,
    originals: KeptOriginals | None = None,
    on_progress: ProgressFn | None = None,
    dry_run: bool = False,
) -> SyncReport:
    """Sync `request.folder` into `request.collection` (see the module docstring).

    Args:
        embedder: connected; store: connected (where documents are read from and staged).
        ledger: the sync state (`tools.store.sync_state.PostgresSyncLedger` over the same store).
        options: the chunk window, `batch_docs` (files read and embedded per embed call), `max_file_bytes` and
            `ocr` (how scanned pages and images are read) (its `collection` is not used: `request.collection` is).
        originals: where added and updated files are kept (None: not kept).
        on_progress: `(files done, files to change, chunks written)` after each file.
        dry_run: plan only: the report lists what would change (nothing is embedded or written, no state made).

    Raises:
        IngestError: the folder or root is wrong (see `SyncRequest.checked`).
        EmbedderError / StoreError: Triton or Postgres failed; the files done before stay done, a re-run finishes.

    One sync of a folder into a collection runs at a time (`SyncLedger.exclusive`: in Postgres an advisory lock held
    for the whole run): a second one (another job, a job claimed again, `--watch` beside a job) waits for the first to
    end, then plans against the state it left. A dry run takes no lock.
    """
    start = time.perf_counter()
    await ledger.setup()
    if dry_run:
        return await _sync(request, ledger, embedder, store, options, originals, on_progress, start, dry_run=True)
    folder, _ = request.checked()
    async with ledger.exclusive(str(folder), request.collection):  # one sync of a source at a time
        return await _sync(request, ledger, embedder, store, options, originals, on_progress, start, dry_run=False)


async def _sync(
    request: SyncRequest,
    ledger: SyncLedger,
    embedder: DocumentEmbedder,
    store: ChunkSink,
    options: IngestOptions,
    originals: KeptOriginals | None,
    on_progress: ProgressFn | None,
    start: float,
    *,
    dry_run: bool,
) -> SyncReport:
    """`sync_folder`'s run, under the source's lock unless `dry_run`."""
    plan, source_id, folder, root, recorded = await plan_folder(request, ledger, options)
    rules = NO_RULES if dry_run else await asyncio.to_thread(GroupRules.scan, folder, request.groups)
    previous = plan.groups_state.file_hash if plan.groups_state is not None else NO_RULES.fingerprint
    rules_changed = rules.fingerprint != previous
    report = SyncReport(dry_run=dry_run, failed=list(plan.failed), unchanged=len(plan.unchanged))
    report.pending = [printable(folder / rel) for rel in plan.pending]
    skipped = {c.seen.rel_path: why for c in _candidates(plan) if (why := _synced(c)) is not None}
    for rel, why in skipped.items():
        report.skipped.append(FileError(str(folder / rel), "unsupported", why))
    report.skipped += plan.outside
    for rel in plan.skipped:  # recorded as skipped, unchanged: not read again
        why = f"{folder / rel}: not a synced type (unsupported, or a JSONL corpus), skipped"
        report.skipped.append(FileError(str(folder / rel), "unsupported", why))
    if dry_run:
        report.added = [c.doc_id for c in plan.added if c.seen.rel_path not in skipped]
        report.updated = [c.doc_id for _, c in plan.updated if c.seen.rel_path not in skipped]
        report.moved = [(old.doc_id, c.doc_id) for old, c in plan.moved if c.seen.rel_path not in skipped]
        report.removed = [s.doc_id for s in plan.removed]
        report.wall_s = time.perf_counter() - start
        return report
    if source_id is None or plan.changes or plan.touched or skipped or rules_changed:
        source_id = await ledger.open_source(
            str(folder), request.collection, str(root), request.prefix, request.include, request.exclude
        )
    counted = CountingEmbedder(embedder)
    run = _Run(request.collection, ledger, source_id, counted, store, options, originals, report, on_progress, rules)
    run.regroup_moves = rules.active or rules_changed
    run.total = plan.changes
    # A file of a type that is not synced: its state records it as skipped (the next run does not read it again);
    # a document it had (its type changed) goes.
    for old, candidate in [*plan.updated, *plan.moved]:
        if candidate.seen.rel_path in skipped and old.status == "stored":
            await run.remove(old)
    for candidate in _candidates(plan):
        if candidate.seen.rel_path in skipped:
            await ledger.store_file(source_id, request.collection, candidate.state(None, skipped=True), None)
    for old, candidate in plan.moved:
        if candidate.seen.rel_path not in skipped:
            await run.move(old, candidate)
    for state in plan.removed:
        await run.remove(state)
    pending: list[tuple[FileState | None, Candidate]] = [(None, c) for c in plan.added]
    pending += plan.updated
    writes = [(old, c) for old, c in pending if c.seen.rel_path not in skipped]
    for i in range(0, len(writes), options.batch_docs):
        await run.write(writes[i : i + options.batch_docs])
    for state in plan.touched:
        await ledger.touch(source_id, state)
    if rules_changed:  # the documents not written in this run take the new rules' groups, nothing re-embedded
        for rel in dict.fromkeys([*plan.unchanged, *(s.rel_path for s in plan.touched)]):  # each file once
            kept = recorded.get(rel)
            if kept is not None and kept.status == "stored":
                await run.regroup(kept.doc_id, rel)
        await ledger.touch(source_id, FileState(RULES_STATE, 0, 0, rules.fingerprint, "", None, "skipped"))
    if plan.changes or plan.touched:
        await ledger.finished(source_id)
    report.embed_calls, report.chunks_embedded = counted.calls, counted.texts
    report.wall_s = time.perf_counter() - start
    return report


def _candidates(plan: SyncPlan) -> list[Candidate]:
    return [*plan.added, *(c for _, c in plan.updated), *(c for _, c in plan.moved)]


@dataclass
class _Run:
    """The changes of one sync being applied (each method: one file, its own transaction(s))."""

    collection: str
    ledger: SyncLedger
    source_id: int
    embedder: CountingEmbedder
    store: ChunkSink
    options: IngestOptions
    originals: KeptOriginals | None
    report: SyncReport
    on_progress: ProgressFn | None
    rules: GroupRules = NO_RULES
    regroup_moves: bool = False
    """Whether a document moved unchanged takes the rules' groups (rules in force now or before this run)."""
    total: int = 0
    done: int = 0

    def _progress(self) -> None:
        self.done += 1
        if self.on_progress is not None:
            self.on_progress(self.done, self.total, self.report.chunks_written)

    def _fail(self, candidate: Candidate, reason: str) -> None:
        self.report.failed.append(FileError(str(candidate.seen.path), candidate.kind, reason))

    async def _read(self, candidate: Candidate) -> SourceDocument | IngestError | None:
        """The file's document (None: no text), or the error that failed it."""
        inp = InputFile(candidate.seen.path, candidate.doc_id, kind=candidate.kind)
        try:
            read = await asyncio.to_thread(read_file_document, inp, self.options.max_file_bytes, self.options.ocr)
        except IngestError as exc:
            return exc
        if read.document is None:
            return None
        return with_groups(read.document, self.rules.groups_for(candidate.seen.rel_path))

    async def regroup(self, doc_id: str, rel_path: str) -> None:
        """Set the groups of the stored document `doc_id` of the file at `rel_path` to those the rules give it
        (`tools.ingest.ports.DocumentGroups`: the store's `set_document_groups`, no re-embedding)."""
        groups = self.rules.groups_for(rel_path) or ()
        if await document_groups_port(self.store).set_document_groups(doc_id, groups, self.collection):
            self.report.regrouped.append(doc_id)

    async def _original(self, action: str, *args: object) -> None:
        """`KeptOriginals.<action>(collection, *args)` in a worker thread; a failure is logged (the document stays)."""
        if self.originals is None:
            return
        try:
            await asyncio.to_thread(getattr(self.originals, action), self.collection, *args)
        except OSError as exc:
            log.warning("keeping the original (%s %s) failed: %s", action, args[0], exc)

    async def remove(self, state: FileState, progress: bool = True) -> None:
        """The file of `state` is gone (or its document is): its document, original and state row go."""
        if await self.ledger.remove(self.source_id, self.collection, state):
            self.report.removed.append(state.doc_id)
            await self._original("remove", state.doc_id)
        if progress:
            self._progress()

    async def move(self, old: FileState, candidate: Candidate) -> None:
        """A renamed file (the same bytes): its document moved to the new id. Only a text or Markdown file is read
        again (its title may come from its file name); any other kind's content depends on its bytes alone, so it is
        moved as it is, nothing read (no extraction, no OCR)."""
        if candidate.kind not in NAMED_KINDS and old.content_hash is not None:
            await self._moved(old, candidate, str(candidate.seen.path))
        else:
            await self._move_read(old, candidate)
        self._progress()

    async def _moved(self, old: FileState, candidate: Candidate, source: str) -> None:
        """The document of `old` moved to the candidate's id, unchanged (its content hash is the same)."""
        state = candidate.state(old.content_hash)
        counts = await self.ledger.move(self.source_id, self.collection, old, state, source, None)
        if counts.missing:  # its document was deleted meanwhile: the file is written anew
            await self.ledger.remove(self.source_id, self.collection, old)
            await self.write([(None, candidate)], progress=False)
        else:
            self.report.moved.append((old.doc_id, candidate.doc_id))
            await self._original("move", old.doc_id, candidate.doc_id)
            if self.regroup_moves:
                await self.regroup(candidate.doc_id, candidate.seen.rel_path)  # moved as it was: its groups too

    async def _move_read(self, old: FileState, candidate: Candidate) -> None:
        """`move` of a file read again: its content may name its file."""
        document = await self._read(candidate)
        if isinstance(document, IngestError):
            self._fail(candidate, str(document))
        elif document is None:  # the renamed file has no text any more (its bytes are the same: it never had)
            await self.remove(old, progress=False)
            await self.ledger.store_file(self.source_id, self.collection, candidate.state(None), None)
        elif document.content_hash == old.content_hash:
            await self._moved(old, candidate, document.source)
        elif len(document.content) > LARGE_DOC_CHARS:  # a large document naming its file: removed, written anew
            await self.remove(old, progress=False)
            await self._write_large(None, candidate, document)
        else:  # the content names its file (a title from the file name): the new version, unchanged chunks reused
            prepared = await prepare(
                [document],
                self.embedder,
                self.store,
                self.options.chunk_tokens,
                self.options.overlap_tokens,
                self.collection,
                lend_from={document.doc_id: old.doc_id},
            )
            self.report.chunks_reused += prepared.reused
            if prepared.failed:
                self._fail(candidate, f"{candidate.seen.path}: a chunk could not be embedded; the document is kept")
            else:
                record = prepared.records[0] if prepared.records else None
                state = candidate.state(document.content_hash)
                if record is None:  # the new id already holds this content
                    await self.ledger.remove(self.source_id, self.collection, old)
                    await self.ledger.store_file(self.source_id, self.collection, state, None)
                else:
                    await self.ledger.move(self.source_id, self.collection, old, state, document.source, record)
                    self.report.chunks_written += len(record.chunks)
                self.report.moved.append((old.doc_id, candidate.doc_id))
                await self._original("move", old.doc_id, candidate.doc_id)

    async def write(self, batch: list[tuple[FileState | None, Candidate]], progress: bool = True) -> None:
        """Read, embed (one call for the batch's small documents, unchanged chunks reused) and store each file of
        `batch` in its own transaction."""
        documents: list[tuple[FileState | None, Candidate, SourceDocument]] = []
        for old, candidate in batch:
            document = await self._read(candidate)
            if isinstance(document, IngestError):
                self._fail(candidate, str(document))
                self._progress()
            elif document is None:
                stored = await self.ledger.store_file(self.source_id, self.collection, candidate.state(None), None)
                await self._removed(stored.removed)
                self._progress()
            elif len(document.content) > LARGE_DOC_CHARS:
                await self._write_large(old, candidate, document)
                if progress:
                    self._progress()
            else:
                documents.append((old, candidate, document))
        if not documents:
            return
        prepared = await prepare(
            [d for _, _, d in documents],
            self.embedder,
            self.store,
            self.options.chunk_tokens,
            self.options.overlap_tokens,
            self.collection,
            lend_from=_lenders(documents),
        )
        self.report.chunks_reused += prepared.reused
        records = {r.doc_id: r for r in prepared.records}
        bad = {b.doc_id for b in prepared.failed}
        for old, candidate, document in documents:
            if document.doc_id in bad:
                self._fail(candidate, f"{candidate.seen.path}: a chunk could not be embedded; the document is kept")
            else:
                record = records.get(document.doc_id)
                state = candidate.state(document.content_hash)
                stored = await self.ledger.store_file(self.source_id, self.collection, state, record)
                if stored.counts.missing:
                    self._fail(candidate, f"{candidate.seen.path}: its document changed meanwhile; sync again")
                else:
                    self.report.chunks_written += stored.counts.chunks
                    await self._removed(stored.removed)
                    if record is None:  # stored with this content already (e.g. by `rag ingest`): adopted
                        self.report.unchanged += 1
                    else:
                        (self.report.added if _new(old, candidate) else self.report.updated).append(candidate.doc_id)
                    await self._original("keep", candidate.doc_id, candidate.seen.path)
            if progress:
                self._progress()

    async def _write_large(self, old: FileState | None, candidate: Candidate, document: SourceDocument) -> None:
        """A large document: staged and committed as in `rag ingest` (no reuse), then its state recorded."""
        versions = await self.store.stored_versions([document.doc_id], self.collection)
        if versions.get(document.doc_id) != document.content_hash:
            result = await ingest_large(
                document,
                self.embedder,
                self.store,
                self.options.chunk_tokens,
                self.options.overlap_tokens,
                collection=self.collection,
            )
            if result.failed:
                self._fail(candidate, f"{candidate.seen.path}: a chunk could not be embedded; the document is kept")
                return
            self.report.chunks_written += result.chunks
        state = candidate.state(document.content_hash)
        stored = await self.ledger.store_file(self.source_id, self.collection, state, None)
        await self._removed(stored.removed)
        (self.report.added if _new(old, candidate) else self.report.updated).append(candidate.doc_id)
        await self._original("keep", candidate.doc_id, candidate.seen.path)

    async def _removed(self, doc_id: str | None) -> None:
        """Report document `doc_id` removed (None: nothing was) and remove its original."""
        if doc_id is not None:
            self.report.removed.append(doc_id)
            await self._original("remove", doc_id)


def _new(old: FileState | None, candidate: Candidate) -> bool:
    """Whether the file's document is new (not an update of the one its state owned under the same id)."""
    return old is None or old.status != "stored" or old.doc_id != candidate.doc_id


def _lenders(documents: Sequence[tuple[FileState | None, Candidate, SourceDocument]]) -> dict[str, str]:
    """New doc id -> the doc id the file's state owned before (its id changed with `--prefix` or `--root`): that
    document lends its vectors to the unchanged chunks."""
    return {
        c.doc_id: old.doc_id
        for old, c, _ in documents
        if old is not None and old.status == "stored" and old.doc_id != c.doc_id
    }
