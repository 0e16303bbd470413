"""What `rag up` shows while the local stack starts: each service as it starts, with a spinner and the time elapsed
(a Rich progress display on stderr, drawn only when stderr is a terminal), and a line per service once it is ready
(on stdout: `ready <name> (pid N) in S s`); when stderr is not a terminal, a `starting <name>...` line on stderr
instead of the spinner."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

HINTS = {"vllm": " (loads the model: a minute or two)"}
"""What the spinner adds for slow services."""


class UpProgress:
    """Progress of `infra.stack.up` (it follows `infra.stack.UpProgress`); a context manager around the start."""

    def __init__(self, console: Console, err_console: Console) -> None:
        self.console = console
        self.err_console = err_console
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> UpProgress:
        if self.err_console.is_terminal:
            self.progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.progress.stop()

    def starting(self, name: str) -> None:
        """Show that service `name` is starting."""
        description = f"starting {name}{HINTS.get(name, '')}"
        if self.err_console.is_terminal:
            self.tasks[name] = self.progress.add_task(description, total=None)
        else:
            self.err_console.print(f"{description}...", markup=False, highlight=False)

    def ready(self, name: str, pid: int, seconds: float) -> None:
        """Print that service `name` is ready, and drop its spinner."""
        if name in self.tasks:
            self.progress.remove_task(self.tasks.pop(name))
        self.console.print(Text.assemble(("ready", "green"), f" {name} (pid {pid}) in {seconds:.1f} s"))
