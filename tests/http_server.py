"""A real `rag serve` on a free port for the HTTP stack tests, and its event-stream parser."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from agent.config.settings import Settings
from evals.off_topic import OFF_TOPIC as OFF_TOPIC_QUESTIONS
from infra.processes import free_port
from tests.conftest import cli_env

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."


OFF_TOPIC = OFF_TOPIC_QUESTIONS[0]  # "Who won the 2018 FIFA World Cup?"


class RagServe:
    """`rag serve --port <free>` in a subprocess with the test stack's environment; stopped by its PID.

    Its output goes to a log file (`log_path`, default `<DATA_DIR>/logs/rag-serve-<port>.log`, under the tests'
    temporary directory), never to a pipe: a pipe nobody reads fills up and stalls the server after a few hundred
    requests. A server that exits or does not answer raises with the log's tail (`log_tail`).
    """

    def __init__(self, settings: Settings, env: dict[str, str] | None = None, log_path: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.settings = settings
        self.env = env or {}
        self.log_path = log_path or settings.data_dir / "logs" / f"rag-serve-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the server's output ('' before it wrote any)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> RagServe:
        command = [sys.executable, "-m", "agent", "serve", "--port", str(self.port)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                command, env=cli_env(self.settings) | self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rag serve exited ({self.log_path}):\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.__exit__()
        raise RuntimeError(f"rag serve did not answer within 120 s ({self.log_path}):\n{self.log_tail()}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def sse_events(response: httpx.Response) -> list[tuple[str, Any]]:
    """(event, JSON data) pairs of a `text/event-stream` body."""
    events = []
    for block in response.text.split("\n\n"):
        lines = block.strip().splitlines()
        name = next((line[6:].strip() for line in lines if line.startswith("event:")), "message")
        data = [line[5:].strip() for line in lines if line.startswith("data:")]
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


