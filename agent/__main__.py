"""`python -m agent` runs the `rag` CLI."""

from agent.cli.main import app

app(prog_name="rag")
