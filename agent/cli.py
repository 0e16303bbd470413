"""The `rag` command line: `up`, `down`, `status`, `ingest`, `ask`, `chat` (Typer + Rich)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Annotated, cast, get_args

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from agent.app import RagApp
from agent.chat import print_sources, run_chat
from agent.errors import AgentError
from agent.ingest_cli import ingest_progress, one_line_pool_warnings, report_lines
from agent.results import AskResult
from agent.settings import Policy, Settings, describe_validation_error
from evals.cli import bench_app, eval_app
from infra import processes, stack
from infra.config import StackConfig
from tools.embedder import EmbedderError
from tools.ingest import IngestError, IngestReport, plan_inputs
from tools.store import StoreError

app = typer.Typer(help="triton-rag: answers questions over your documents with cited sources.", no_args_is_help=True)
console = Console()
err_console = Console(stderr=True, soft_wrap=True)
app.add_typer(eval_app, name="eval")
app.add_typer(bench_app, name="bench")

USER_ERRORS = (ValueError, IngestError, StoreError, EmbedderError, processes.ServiceError, AgentError)


def _fail(message: str) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code=1)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level.")] = False) -> None:
    """Global options."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        Settings()  # contradictions and bad values are reported once, as one line, before any command runs
    except ValidationError as exc:
        raise _fail(describe_validation_error(exc)) from None
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@app.command()
def up(
    only: Annotated[list[str] | None, typer.Option("--only", help="Start only these services.")] = None,
) -> None:
    """Start the local stack (Postgres, Triton, vLLM) in the background; idempotent."""
    settings = Settings()
    try:
        with console.status("starting the local stack (vLLM takes a minute or two)..."):
            pids = stack.up(StackConfig.of(settings), tuple(only) if only else None)
    except processes.ServiceError as exc:
        raise _fail(str(exc)) from None
    for name, pid in pids.items():
        console.print(f"[green]ready[/] {name} (pid {pid})")


@app.command()
def down() -> None:
    """Stop the local stack by PID."""
    stopped = stack.down(StackConfig.of(Settings()))
    console.print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@app.command()
def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Report each local service: PID and health check."""
    rows = stack.status(StackConfig.of(Settings()))
    if as_json:
        print(
            json.dumps(
                {
                    s.name: {"pid": s.pid, "healthy": s.healthy, "detail": s.detail}
                    | ({"metrics": s.metrics} if s.metrics else {})
                    for s in rows
                }
            )
        )
    else:
        table = Table("service", "pid", "healthy", "detail")
        for s in rows:
            table.add_row(s.name, str(s.pid or "-"), "[green]yes[/]" if s.healthy else "[red]no[/]", s.detail)
        console.print(table)
    if not all(s.healthy for s in rows):
        raise typer.Exit(code=1)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help=".jsonl (BEIR corpus), .txt or .md files")],
    root: Annotated[
        Path | None,
        typer.Option(help="Ids of .txt/.md files are their paths relative to this (default: cwd or common parent)."),
    ] = None,
    prefix: Annotated[str, typer.Option(help="Prepended to every document id.")] = "",
    ceiling: Annotated[
        bool, typer.Option(help="Measure the in-process ONNX Runtime ceiling on a sample of the run's chunks.")
    ] = True,
) -> None:
    """Chunk, embed and store documents; re-ingesting the same content adds nothing, an interrupted run resumes."""
    settings = Settings()
    one_line_pool_warnings()

    async def run() -> IngestReport:
        with ingest_progress(err_console, console.is_terminal) as progress:
            async with RagApp.from_settings(settings) as rag:
                report = await rag.ingest(paths, on_progress=progress, root=root, prefix=prefix)
                docs, chunks = await rag.store.count()
        for line in report_lines(report, settings, ceiling):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        console.print(f"store holds {docs} documents, {chunks} chunks", highlight=False)
        return report

    try:
        plan_inputs(paths, root, prefix)
        asyncio.run(run())
    except EmbedderError as exc:
        raise _fail(f"{exc}; the batches stored so far are kept: run the same ingest again to resume") from None
    except USER_ERRORS as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise _fail("interrupted; the batches stored so far are kept: run the same ingest again to resume") from None


def _print_answer(result: AskResult, streamed: bool = False) -> None:
    if not streamed:
        console.print(result.answer, highlight=False)
    print_sources(console, result)


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, max=100, help="Passages to retrieve.")] = None,
    policy: Annotated[
        str | None, typer.Option("--policy", help="Retrieval policy: always or agentic (default AGENT_POLICY).")
    ] = None,
) -> None:
    """Answer one question with citations."""

    async def run() -> AskResult:
        async with RagApp.from_settings() as rag:
            return await rag.ask(question, top_k, policy=_policy(policy))

    if not question.strip():
        raise _fail("QUESTION is empty; expected a non-blank question")
    try:
        result = asyncio.run(run())
    except USER_ERRORS as exc:
        raise _fail(str(exc)) from None
    if as_json:
        print(json.dumps(result.to_json_dict()))
    else:
        _print_answer(result)


def _policy(value: str | None) -> Policy | None:
    if value is None or value in get_args(Policy):
        return cast(Policy | None, value)
    raise _fail(f"--policy {value!r}; expected one of {', '.join(map(repr, get_args(Policy)))}")


@app.command()
def chat(
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, max=100)] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="always or agentic (default AGENT_POLICY).")] = None,
) -> None:
    """Interactive questions and answers, streamed, with tool activity and sources; Ctrl-C cancels the answer,
    an empty line or Ctrl-D quits."""
    chosen = _policy(policy)

    async def session() -> None:
        async with RagApp.from_settings() as rag:
            await run_chat(rag, console, top_k, chosen)

    try:
        asyncio.run(session())
    except USER_ERRORS as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        console.print()


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8080,
) -> None:
    """Serve the HTTP API (`POST /v1/ask`, `POST /v1/ask/stream`, `GET /health`) and the web chat page at `/`."""
    import uvicorn

    from agent.http_api import create_app

    try:
        processes.require_free_ports("rag serve", {"--port": port})
    except processes.ServiceError as exc:
        raise _fail(str(exc)) from None
    uvicorn.run(create_app(Settings()), host=host, port=port, log_level="info")
