"""`rag eval ...` and `rag bench ...` command groups (registered on the `rag` CLI in `agent/cli.py`).

Each evaluation or benchmark module adds its command here with `@eval_app.command(...)` / `@bench_app.command(...)`.
"""

from __future__ import annotations

import typer

eval_app = typer.Typer(
    help="Evaluations on real data: retrieval quality, answer quality, comparisons.", no_args_is_help=True
)
bench_app = typer.Typer(help="Load benchmarks that print figures.", no_args_is_help=True)
