"""`python -m agent` runs the `rag` CLI."""

from agent.cli import app

app(prog_name="rag")
