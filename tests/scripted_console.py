"""A Rich console whose input is scripted, for the `rag chat` loop's tests (`agent.cli.chat.run_chat`)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.text import Text


class ScriptedConsole(Console):
    """A console writing to a buffer whose `input` returns `lines` in order, then raises EOFError (Ctrl-D); with
    `echo`, each prompt is printed first (as a terminal shows it)."""

    def __init__(self, lines: list[str], echo: bool = True) -> None:
        self.buffer = io.StringIO()
        super().__init__(file=self.buffer, width=200, color_system=None)
        self.pending: Iterator[str] = iter(lines)
        self.echo = echo

    def input(self, prompt: str | Text = "", **_: Any) -> str:
        """The next scripted line (the prompt printed first when `echo`)."""
        if self.echo:
            self.print(prompt, end="")
        try:
            return next(self.pending)
        except StopIteration:
            raise EOFError from None
