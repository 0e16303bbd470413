"""The `rag` command line: `up`, `down`, `status`, `ingest`, `sync`, `docs`, `ask`, `chat`, `serve`, `mcp` (Typer,
Rich).

Output: results go to stdout; progress, spinners, warnings and errors go to stderr, so with `--json` stdout holds
the JSON object and nothing else. Model and document text is printed as plain text, never as Rich markup.

Errors: one handler (`RagTyper.__call__`) turns the product's error types (`agent.core.failures.describe`: agent,
embedder, store, Postgres, settings validation, bad input, local stack) into one line `error: <message>` on stderr
and exit code 1. Any other exception is a bug: it is reported as one line too, naming its type, and `rag --debug
...` shows the full traceback of every error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.cli.access import DocumentGroupsOption, access_app, split_groups
from agent.cli.chat import print_sources, run_chat
from agent.cli.feedback import feedback_app
from agent.cli.ingest import IngestTally, ingest_progress, one_line_pool_warnings, report_json, report_lines
from agent.cli.jobs import jobs_app, worker
from agent.cli.keys import keys_app
from agent.cli.support_view import marked_answer
from agent.cli.up import UpProgress
from agent.config.settings import Policy, Settings, describe_validation_error
from agent.core.answer import AnswerRequest
from agent.core.app import RagApp
from agent.core.errors import InputError
from agent.core.failures import Failure, describe
from agent.core.pages import PageError
from agent.core.results import AskResult, SupportMode
from agent.core.wiring import open_ingestion
from evals.cli import bench_app, eval_app
from infra import processes, stack
from infra.config import StackConfig
from infra.processes import ServiceError
from tools.errors import EmbedderError
from tools.ingest import IngestReport, plan_inputs
from tools.render_page import MAX_SCALE, MIN_SCALE, RenderedPage
from tools.scope import DEFAULT_COLLECTION, ScopeError, SearchScope, check_collection

IdPrefix = Annotated[str, typer.Option(help="Prepended to every document id.")]
"""The `--prefix` option of the commands that store documents."""
TargetCollection = Annotated[
    str, typer.Option("--collection", help="The collection the documents go into (a-z, 0-9, _ . -).")
]
"""The `--collection` option of the commands that store documents."""


class RagTyper(typer.Typer):
    """`typer.Typer` with the CLI's one error handler around every command (see the module docstring)."""

    debug = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the CLI; a known failure prints `error: <message>` and exits 1 (a traceback with `--debug`)."""
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            if RagTyper.debug:
                raise
            failure = Failure("service_error", str(exc).strip()) if isinstance(exc, ServiceError) else describe(exc)
            if failure is None:
                message = f"unexpected {type(exc).__name__}: {exc} (run `rag --debug ...` for the traceback)"
            else:
                message = failure.message
            _print_error(message)
            sys.exit(1)


def _print_error(message: str) -> None:
    """`error: <message>` on stderr; the message is plain text (never Rich markup)."""
    err_console.print(Text.assemble(("error: ", "bold red"), message), highlight=False)


app = RagTyper(help="triton-rag: answers questions over your documents with cited sources.", no_args_is_help=True)
docs_app = typer.Typer(help="List and delete stored documents, and render their pages.", no_args_is_help=True)
console = Console(highlight=False)
err_console = Console(stderr=True, soft_wrap=True, highlight=False)
app.add_typer(eval_app, name="eval")
app.add_typer(bench_app, name="bench")
app.add_typer(docs_app, name="docs")
app.add_typer(jobs_app, name="jobs")
app.add_typer(keys_app, name="keys")
app.add_typer(access_app, name="access")
app.add_typer(feedback_app, name="feedback")
app.command("worker")(worker)


def print_json(payload: object) -> None:
    """The `--json` output: one JSON document on stdout, nothing else."""
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level (on stderr).")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of any error.")] = False,
) -> None:
    """Global options."""
    RagTyper.debug = debug
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        Settings()  # contradictions and bad values are reported once, as one line, before any command runs
    except ValidationError as exc:
        _print_error(describe_validation_error(exc))
        raise typer.Exit(code=1) from None
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@app.command()
def up(
    only: Annotated[
        list[str] | None, typer.Option("--only", help=f"Start only these services: {', '.join(stack.SERVICES)}.")
    ] = None,
) -> None:
    """Start the local stack (Postgres, Triton, vLLM) in the background; idempotent. Each service is reported as it
    starts and once it is ready (vLLM takes a minute or two)."""
    settings = Settings()
    with UpProgress(console, err_console) as progress:
        stack.up(StackConfig.of(settings), tuple(only) if only else None, progress)


@app.command()
def down() -> None:
    """Stop the local stack by PID (a PID file naming another process is removed, and nothing is signalled)."""
    stopped = stack.down(StackConfig.of(Settings()))
    console.print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}", markup=False)


@app.command()
def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False) -> None:
    """Report each local service: PID and health check; exit code 1 unless all are healthy."""
    rows = stack.status(StackConfig.of(Settings()))
    if as_json:
        print_json(
            {
                s.name: {"pid": s.pid, "healthy": s.healthy, "detail": s.detail}
                | ({"metrics": s.metrics} if s.metrics else {})
                for s in rows
            }
        )
    else:
        table = Table("service", "pid", "healthy", "detail")
        for s in rows:
            healthy = Text("yes", "green") if s.healthy else Text("no", "red")
            table.add_row(Text(s.name), Text(str(s.pid or "-")), healthy, Text(s.detail))
        console.print(table)
    if not all(s.healthy for s in rows):
        raise typer.Exit(code=1)


@app.command()
def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Files or folders (walked recursively): PDF, HTML, DOCX, Markdown, text, BEIR .jsonl, PNG/JPEG/TIFF"
        ),
    ],
    root: Annotated[
        Path | None,
        typer.Option(help="Ids of document files are their paths relative to this (default: cwd or common parent)."),
    ] = None,
    prefix: IdPrefix = "",
    collection: TargetCollection = DEFAULT_COLLECTION,
    include: Annotated[
        list[str] | None, typer.Option("--include", help="Only files in folders matching this glob (repeatable).")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option("--exclude", help="Leave out files in folders matching this glob (repeatable).")
    ] = None,
    ceiling: Annotated[
        bool,
        typer.Option(
            help="Also measure the in-process ONNX Runtime ceiling on a sample of the run's chunks and print the "
            "run's throughput as a ratio of it (a benchmark: needs the `local` extra)."
        ),
    ] = False,
    groups: DocumentGroupsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as one JSON object only.")] = False,
) -> None:
    """Chunk, embed and store documents; re-ingesting the same content adds nothing, an interrupted run resumes.
    Files that cannot be read are listed with the cause and the run goes on; the exit code is 1 when any failed.
    Progress goes to stderr. `--ceiling` adds the in-process throughput ceiling benchmark."""
    settings = Settings()
    one_line_pool_warnings()
    tally = IngestTally()
    globs = {"include": include or [], "exclude": exclude or []}
    readers = None if groups is None else split_groups(groups)

    async def run() -> tuple[IngestReport, int, int]:
        with ingest_progress(err_console, err_console.is_terminal) as progress:
            async with open_ingestion(settings) as ingestion:
                return await ingestion.ingest_files(
                    paths,
                    tally.track(progress),
                    root=root,
                    prefix=prefix,
                    collection=collection,
                    groups=readers,
                    **globs,
                )

    check_collection(collection)
    plan_inputs(paths, root, prefix, **globs)
    try:
        report, docs, chunks = asyncio.run(run())
    except EmbedderError as exc:
        raise EmbedderError(f"{exc}; {tally.kept()}") from exc
    except KeyboardInterrupt:
        raise ServiceError(f"interrupted; {tally.kept()}") from None
    if as_json:
        print_json(report_json(report, docs, chunks))
    else:
        for line in report_lines(report, settings):
            console.print(line, markup=False, soft_wrap=True)
        if ceiling:
            from evals.cli import ingest_ceiling_line

            console.print(ingest_ceiling_line(report, settings), markup=False, soft_wrap=True)
        console.print(f"store holds {docs} documents, {chunks} chunks", markup=False)
    if report.any_failed:
        raise typer.Exit(code=1)


@app.command()
def sync(
    folder: Annotated[Path, typer.Argument(help="The folder to sync (walked recursively).")],
    root: Annotated[
        Path | None, typer.Option(help="Document ids are paths relative to this folder (default: FOLDER itself).")
    ] = None,
    prefix: IdPrefix = "",
    collection: TargetCollection = DEFAULT_COLLECTION,
    include: Annotated[
        list[str] | None, typer.Option("--include", help="Only files matching this glob (repeatable).")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option("--exclude", help="Leave out files matching this glob (repeatable).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would change; embed and write nothing.")
    ] = False,
    watch: Annotated[
        bool, typer.Option("--watch", help="After the sync, sync again on every change until Ctrl-C or SIGTERM.")
    ] = False,
    groups: Annotated[
        str | None,
        typer.Option(
            "--groups",
            help="Comma-separated groups allowed to read the documents no `.rag-groups` file covers, e.g. a,b "
            "(default: none, everyone).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object only.")] = False,
) -> None:
    """Make the collection's documents of FOLDER converge to it: new and changed files ingested (unchanged chunks
    keep their vectors), renamed files moved (no embedding), deleted files' documents removed (only documents synced
    from FOLDER). A second run with nothing changed reads no file. Files that fail are listed with the cause and
    keep their stored document; the exit code is 1 when any failed. Progress goes to stderr. A `.rag-groups` file in
    a folder (one group per line) sets the groups allowed to read the documents in it and below; a change of one is
    applied on the next sync without re-embedding."""
    from agent.core.ingestion import SyncReport, SyncRequest
    from agent.core.wiring import open_ingestion

    settings = Settings()
    one_line_pool_warnings()
    check_collection(collection)
    readers = None if groups is None else split_groups(groups)
    request = SyncRequest(folder, collection, root, prefix, tuple(include or ()), tuple(exclude or ()), readers)
    request.checked()

    def show(report: SyncReport) -> None:
        if as_json:
            print_json(report.to_json())
            return
        for line in report.lines():
            console.print(line, markup=False, soft_wrap=True)

    if watch and not dry_run:

        async def watching() -> int:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            err_console.print(f"watching {folder} (Ctrl-C stops)", markup=False)
            async with open_ingestion(settings) as service:
                return await service.watch(
                    request, show, stop, on_error=lambda exc: _print_error(f"{exc}; the next change retries")
                )

        runs = asyncio.run(watching())
        err_console.print(f"stopped after {runs} syncs", markup=False)
        return

    async def once() -> SyncReport:
        with ingest_progress(err_console, err_console.is_terminal and not dry_run, "sync") as progress:
            async with open_ingestion(settings) as service:
                return await service.sync(request, progress, dry_run=dry_run)

    try:
        report = asyncio.run(once())
    except KeyboardInterrupt:
        raise ServiceError("interrupted; the files synced so far are kept: run the same sync again to finish") from None
    show(report)
    if report.any_failed:
        raise typer.Exit(code=1)


LIST_PAGE = 1000
"""Documents `rag docs list` reads per page (one short transaction each); memory holds one page."""


class PlainTable:
    """A table printed line by line as plain text, for listings too long for rich's `Table` (which measures every
    cell of the whole table to lay it out: at 100,000 documents 25x slower than the JSON). The column widths come
    from the first rows seen (capped at `max_width`, longer values cut with `…`) and hold for every later row, so
    rows streamed page by page line up under one header; the first column (an id) is never cut.

    Args:
        columns: the header of each column.
        max_width: the widest any column but the first gets, characters.
        min_widths: the narrowest some columns get (by header), characters: room for a later row's longer text.
    """

    def __init__(self, columns: Sequence[str], max_width: int = 40, min_widths: dict[str, int] | None = None) -> None:
        self.columns = list(columns)
        self.max_width = max_width
        self.min_widths = min_widths or {}
        self.widths: list[int] | None = None

    def lines(self, rows: Sequence[Sequence[str]]) -> Iterator[str]:
        """The lines of `rows` (one value per column), after the header when these are the first rows."""
        if self.widths is None:
            longest = [max([len(name), self.min_widths.get(name, 0), *(len(row[i]) for row in rows)])
                       for i, name in enumerate(self.columns)]  # fmt: skip
            self.widths = [width if i == 0 else min(self.max_width, width) for i, width in enumerate(longest)]
            yield self._line(self.columns)
        for row in rows:
            yield self._line(row)

    def _line(self, values: Sequence[str]) -> str:
        assert self.widths is not None
        cells = [
            value if i == 0 or len(value) <= width else value[: width - 1] + "…"
            for i, (value, width) in enumerate(zip(values, self.widths, strict=True))
        ]
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, self.widths, strict=True)).rstrip()


@docs_app.command("list")
def docs_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list only.")] = False,
    limit: Annotated[int | None, typer.Option("--limit", min=0, help="At most this many documents.")] = None,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many (ordered by doc id).")] = 0,
    collection: Annotated[
        list[str] | None, typer.Option("--collection", help="Only this collection (repeatable; default: all).")
    ] = None,
) -> None:
    """Stored documents: doc id, collection, title, source, chunks, content hash (sha256), ingested at (UTC);
    streamed page by page, so any number of documents lists in bounded memory, as a plain-text table
    (`PlainTable`) or JSON."""
    collections = [check_collection(c) for c in collection] if collection else None

    async def pages(rag: RagApp) -> AsyncIterator[list[dict[str, object]]]:
        cursor, left, skip = None, limit, offset
        while left is None or left > 0:
            size = LIST_PAGE if left is None else min(LIST_PAGE, left)
            page = await rag.document_page(size, cursor, skip, collections=collections)
            skip = 0
            yield [
                {
                    "doc_id": d.doc_id,
                    "collection": d.collection,
                    "title": d.title,
                    "source": d.source,
                    "chunks": d.chunks,
                    "content_hash": d.content_hash,
                    "ingested_at": d.ingested_at.isoformat(),
                }
                for d in page.documents
            ]
            left = None if left is None else left - len(page.documents)
            if (cursor := page.next_cursor) is None:
                return

    columns = ("doc id", "collection", "title", "source", "chunks", "content hash", "ingested at")
    table = PlainTable(columns, min_widths={"title": 32, "source": 24})

    async def run() -> int:
        listed = 0
        async with RagApp() as rag:
            if as_json:
                sys.stdout.write("[")
            async for rows in pages(rag):
                if as_json:
                    for row in rows:
                        sys.stdout.write(("," if listed else "") + json.dumps(row))
                        listed += 1
                    sys.stdout.flush()
                    continue
                cells = [
                    [str(row[key]) for key in ("doc_id", "collection", "title", "source", "chunks")]
                    + [str(row["content_hash"])[:12], str(row["ingested_at"])]
                    for row in rows
                ]
                sys.stdout.write("".join(line + "\n" for line in table.lines(cells)))
                sys.stdout.flush()
                listed += len(rows)
            if as_json:
                sys.stdout.write("]\n")
                sys.stdout.flush()
        return listed

    listed = asyncio.run(run())
    if not as_json:
        console.print(f"{listed} documents", markup=False)


@docs_app.command("delete")
def docs_delete(
    doc_ids: Annotated[list[str] | None, typer.Argument(help="Doc ids to delete.", show_default=False)] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="Also delete every document ingested from this path.")
    ] = None,
    collection: Annotated[
        list[str] | None,
        typer.Option("--collection", help="Only in this collection (repeatable; default: every collection)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the deleted ids as JSON only.")] = False,
) -> None:
    """Delete documents and their chunks; exit code 1 when an id named is not stored (the others are deleted)."""
    ids = doc_ids or []
    collections = [check_collection(c) for c in collection] if collection else None

    async def run() -> list[str]:
        async with RagApp() as rag:
            return await rag.delete_documents(ids, source=source, collections=collections)

    if not ids and source is None:
        raise InputError("nothing to delete: expected DOC_ID... or --source PATH")
    deleted = asyncio.run(run())
    missing = sorted(set(ids) - set(deleted))
    if as_json:
        print_json({"deleted": deleted, "not_found": missing})
    else:
        console.print(f"deleted {len(deleted)} documents: {', '.join(deleted) or '-'}", markup=False)
    if missing:
        err_console.print(f"error: not stored: {', '.join(missing)}", markup=False)
        raise typer.Exit(code=1)


@docs_app.command("page")
def docs_page(
    doc_id: Annotated[str, typer.Argument(help="The stored document (a PDF ingested with its original kept).")],
    page: Annotated[int, typer.Argument(min=1, help="The page, from 1.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the PNG image.")],
    chunk: Annotated[
        str | None, typer.Option("--chunk", help="Highlight this chunk's lines (a citation's chunk_id).")
    ] = None,
    collection: Annotated[
        str | None, typer.Option("--collection", help="The document's collection (default: any).")
    ] = None,
    scale: Annotated[
        float,
        typer.Option("--scale", min=MIN_SCALE, max=MAX_SCALE, help="Pixels per PDF point (1 = 72 dpi)."),
    ] = 2.0,
) -> None:
    """Render a page of a stored PDF (a stored image's frame) from its kept original to a PNG image, a chunk's lines
    highlighted (what `GET /v1/documents/{doc_id}/pages/{n}` returns)."""
    collections = [check_collection(collection)] if collection else None

    async def run() -> RenderedPage:
        async with RagApp() as rag:
            return await rag.page_image(doc_id, page, chunk_id=chunk, collections=collections, scale=scale)

    try:
        rendered = asyncio.run(run())
    except PageError as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise typer.Exit(code=1) from None
    out.write_bytes(rendered.png)
    console.print(
        f"wrote {out}: page {page} of {rendered.pages}, {rendered.width}x{rendered.height} pixels", markup=False
    )


FilterOption = Annotated[
    list[str] | None,
    typer.Option(
        "--filter",
        metavar="KEY=VALUE",
        help="Search only documents whose metadata KEY equals VALUE (JSON when it parses: year=2019 is a number); "
        "source=PATH, ingested_after=DATE, ingested_before=DATE filter those columns. Repeat a key for any of "
        "its values; different keys must all match.",
    ),
]
"""`--filter KEY=VALUE` of `rag ask` and `rag chat` (`cli_scope`)."""

CollectionOption = Annotated[
    list[str] | None,
    typer.Option("--collection", metavar="NAME", help="Search only this collection (repeatable; default: all)."),
]
"""`--collection NAME` of `rag ask` and `rag chat` (`cli_scope`)."""


def cli_scope(filters: list[str] | None, collections: list[str] | None) -> SearchScope | None:
    """The search scope of repeated `--filter KEY=VALUE` and `--collection NAME` options; None when neither is given.

    Raises:
        InputError: a malformed filter or collection name (the message names it).
    """
    if not filters and not collections:
        return None
    try:
        return SearchScope.from_cli(filters or [], collections or None)
    except ScopeError as exc:
        raise InputError(str(exc)) from None


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object only.")] = False,
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, max=100, help="Passages to retrieve.")] = None,
    policy: Annotated[
        Policy | None, typer.Option("--policy", help="Retrieval policy: always or agentic (default AGENT_POLICY).")
    ] = None,
    filters: FilterOption = None,
    collections: CollectionOption = None,
    support: Annotated[
        SupportMode | None,
        typer.Option("--support", help="Support check: flag, strict or off (default SUPPORT_CHECK)."),
    ] = None,
) -> None:
    """Answer one question with citations; each sentence is labelled against the passages (unsupported ones marked,
    SUPPORT_CHECK)."""

    if not question.strip():
        raise InputError("QUESTION is empty; expected a non-blank question")
    request = AnswerRequest(
        question, top_k=top_k, policy=policy, scope=cli_scope(filters, collections), support=support
    )

    async def run() -> AskResult:
        async with RagApp() as rag:
            return await rag.ask(request)

    result = asyncio.run(run())
    if as_json:
        print_json(result.to_json_dict())
    else:
        console.print(marked_answer(result), highlight=False, soft_wrap=True)
        print_sources(console, result)


@app.command()
def chat(
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, max=100)] = None,
    policy: Annotated[Policy | None, typer.Option("--policy", help="always or agentic (default AGENT_POLICY).")] = None,
    conversation: Annotated[
        UUID | None,
        typer.Option("--conversation", help="Resume this stored conversation (its id, printed by an earlier chat)."),
    ] = None,
    filters: FilterOption = None,
    collections: CollectionOption = None,
) -> None:
    """Interactive questions and answers, streamed, with tool activity and sources, kept as a stored conversation
    (its id is printed; --conversation ID resumes it); Ctrl-C cancels the answer, an empty line or Ctrl-D quits.
    --filter and --collection narrow every question's search, as in `rag ask`."""
    scope = cli_scope(filters, collections)

    async def session() -> None:
        async with RagApp() as rag:
            await run_chat(rag, console, top_k, policy, conversation, scope)

    try:
        asyncio.run(session())
    except KeyboardInterrupt:
        console.print()


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8080,
) -> None:
    """Serve the HTTP API (`/v1/ask`, `/v1/ask/stream`, `/v1/documents`, `/health`, `/metrics`) and the web chat
    page at `/`; `API_KEY` set: every route but `/health`, `/metrics` and the page needs `Authorization: Bearer
    <key>`; `OIDC_ISSUER` set: a sign-in token of that issuer or a key. One of the two is required when --host is
    not a loopback address. Answers only the hosts of ALLOWED_HOSTS; SIGTERM
    drains for at most SHUTDOWN_GRACE_S seconds, then exits 0."""
    from agent.http import create_app
    from agent.http.deps import app_state
    from agent.http.guards import allowed_hosts_for, require_key_off_loopback
    from agent.http.shutdown import serve as serve_drained

    settings = Settings()
    require_key_off_loopback(settings, host)
    processes.require_free_ports("rag serve", {"--port": port})
    api = create_app(settings.model_copy(update={"allowed_hosts": allowed_hosts_for(settings, host)}))
    serve_drained(api, app_state(api).drain, host, port, settings.shutdown_grace_s)


@app.command()
def mcp() -> None:
    """Serve the MCP tools `search`, `get_document` and `ask` over stdio, for an MCP host (e.g. Claude Desktop) that
    starts this command; stdout carries only MCP messages, logs and errors go to stderr. The same tools are served
    over HTTP at `/mcp` by `rag serve`."""
    from agent.http.mcp_server import serve_stdio

    asyncio.run(serve_stdio(Settings()))
