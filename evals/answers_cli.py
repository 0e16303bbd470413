"""`rag eval answers` and `rag eval compare`: run the answer eval, write the run directory, compare two runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from agent.config.settings import Settings, SettingsError
from evals.answers_eval import (
    JOURNAL_FILE,
    AnswerJournal,
    EvalError,
    failed_line,
    load_cases,
    run_answers_eval,
    run_key,
    scifact_dataset,
    write_run,
)
from evals.answers_report import compare, load_summary
from evals.scifact import DatasetError, Split
from tools.errors import EmbedderError, StoreError

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

EXIT_CASES_FAILED = 2
"""Exit code of `rag eval answers` when the run finished but at least one case failed (1: it could not run)."""
EXIT_INTERRUPTED = 130
"""Exit code of `rag eval answers` interrupted by Ctrl-C (128 + SIGINT, as shells report it)."""


def run_answers_command(
    split: Split,
    cases: Path | None,
    ids: list[str] | None,
    limit: int | None,
    concurrency: int,
    top_k: int | None,
    out: Path,
    as_json: bool,
) -> None:
    """Evaluate, write `out/` (summary.json, results.json, cases.yaml, report.md, plots), print the summary.

    With `as_json`, stdout holds the summary JSON and nothing else (no progress bar; the failed-case line goes to
    stderr). Each answered case is kept in `out/answered.jsonl` as it is scored: an interrupted run (Ctrl-C) keeps
    them, and the same command run again asks only about the rest; the journal is removed once the run is written.
    Exit codes: 0 every case scored; 1 the run could not start (no cases, stack unreachable, a journal of other
    settings); `EXIT_CASES_FAILED` (2) the run finished and was written, but at least one case failed;
    `EXIT_INTERRUPTED` (130) interrupted.
    """
    settings = Settings()
    journal = out / JOURNAL_FILE
    try:
        dataset = load_cases(cases) if cases else scifact_dataset(split, ids=ids)
        if limit is not None:
            dataset.cases = dataset.cases[:limit]
        summary, records = asyncio.run(
            run_answers_eval(dataset, settings, concurrency, top_k, progress=not as_json, journal=journal)
        )
    except (EvalError, DatasetError, SettingsError, EmbedderError, StoreError) as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt:
        kept = len(AnswerJournal(journal, run_key(settings, top_k)).entries) if journal.exists() else 0
        resume = f": run the same command again to resume (they are in {journal})" if kept else ""
        err_console.print(
            f"[bold red]interrupted[/]; {kept} of {len(dataset.cases)} cases answered are kept{resume}", highlight=False
        )
        raise typer.Exit(code=EXIT_INTERRUPTED) from None
    write_run(out, dataset, summary, records)
    journal.unlink(missing_ok=True)
    code = EXIT_CASES_FAILED if summary["errors"] else 0
    if as_json:
        print(json.dumps(summary))
        if code:
            err_console.print(f"[bold red]{failed_line(summary)}[/] (see {out / 'results.json'})", highlight=False)
        raise typer.Exit(code=code)
    title = f"answers: {summary['n']} claims, {failed_line(summary)}"
    table = Table("metric", "value", title=title)
    for key in ("verdict_accuracy", "majority_baseline", "citation_precision", "citation_recall", "refusal_rate"):
        table.add_row(key, "n/a" if summary[key] is None else f"{summary[key]:.4f}")
    console.print(table)
    lat = Table("stage", "p50 ms", "p95 ms", "p99 ms", "n")
    for stage, p in summary["latency_ms"].items():
        lat.add_row(stage, *(str(p.get(k, "-")) for k in ("p50", "p95", "p99", "n")))
    console.print(lat)
    console.print(f"report: {out / 'report.md'}")
    if code:
        err_console.print(
            f"[bold red]{failed_line(summary)}[/]; they score 0 in every score (errors in {out / 'results.json'})",
            highlight=False,
        )
    raise typer.Exit(code=code)


def run_compare_command(run_a: Path, run_b: Path, as_json: bool) -> None:
    """Print the per-metric difference B - A of two runs."""
    try:
        rows = compare(load_summary(run_a), load_summary(run_b))
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(code=1) from None
    if as_json:
        print(json.dumps({name: {"a": a, "b": b, "delta": d} for name, a, b, d in rows}))
        return
    table = Table("metric", str(run_a), str(run_b), "B - A")
    for name, a, b, d in rows:
        table.add_row(
            name, "n/a" if a is None else f"{a:g}", "n/a" if b is None else f"{b:g}", "" if d is None else f"{d:+.4g}"
        )
    console.print(table)
