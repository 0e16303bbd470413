"""The `rag` command line (Typer): the app and its top-level commands in `agent.cli.main`; the sub-commands and their
output in `chat` (`rag chat`), `ingest` (`rag ingest`'s progress and report), `jobs` (`rag jobs`, `rag worker`),
`keys` (`rag keys`) and `up` (`rag up`'s progress).

`app` is re-exported here for the `rag` entry point (`agent.cli:app`) and `python -m agent`."""

from agent.cli.main import RagTyper, app

__all__ = ["RagTyper", "app"]
