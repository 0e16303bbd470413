"""A real `rag serve` on a free port for the HTTP stack tests, and its event-stream parser."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import httpx

from agent.config.settings import Settings
from evals.off_topic import OFF_TOPIC as OFF_TOPIC_QUESTIONS
from infra.processes import free_port
from tests.conftest import cli_env

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."


OFF_TOPIC = OFF_TOPIC_QUESTIONS[0]  # "Who won the 2018 FIFA World Cup?"


class RagServe:
    """`rag serve --port <free>` in a subprocess with the test stack's environment; stopped by its PID."""

    def __init__(self, settings: Settings, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.settings = settings
        self.env = env or {}
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> RagServe:
        command = [sys.executable, "-m", "agent", "serve", "--port", str(self.port)]
        self.process = subprocess.Popen(
            command, env=cli_env(self.settings) | self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rag serve exited: {self.process.stdout.read() if self.process.stdout else ''}")
            try:
                if httpx.get(self.url + "/", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.__exit__()
        raise RuntimeError("rag serve did not answer within 120 s")

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


