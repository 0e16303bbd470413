"""`rag serve`'s shutdown (agent/http/shutdown.py) on a real subprocess with the real Triton and Postgres, the fake
OpenAI server as the LLM and a fake OTLP collector: on SIGTERM an open answer stream, held at the LLM by a gate the test
opens, finishes; meanwhile new requests and /health get 503 (not a refused connection); the last spans are
exported; the process exits 0. With a short grace, a stream that never finishes ends with a retryable `error` event
and the exit is still 0.
Nothing here waits on a clock except failure guards: each step waits for an event or a state it observes."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from agent.config.settings import Settings
from infra.processes import free_port
from tests.conftest import cli_env
from tests.fake_openai import FakeOpenAIServer, Reply, ThreadedServer

pytestmark = pytest.mark.stack

QUESTION = "Does vitamin B12 deficiency raise homocysteine?"
GUARD_S = 180.0
"""Failure guard of every wait (the machine may be loaded); no step depends on it to pass."""


class Collector:
    """A fake OpenTelemetry collector: records every OTLP/HTTP trace export body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.app = FastAPI()

        @self.app.post("/v1/traces")
        async def traces(request: Request) -> Response:
            self.bodies.append(await request.body())
            return Response(status_code=200, media_type="application/x-protobuf")


def wait_for(check: Any, what: str) -> Any:
    """Poll `check()` until it returns a truthy value; fail after `GUARD_S`."""
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def rag_serve(settings: Settings, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`rag serve` on a free port with `env`; killed (by its PID) in any case at the end."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "serve", "--port", str(port)],
        env=cli_env(settings) | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"rag serve exited: {process.stdout.read() if process.stdout else ''}")
            try:
                return httpx.get(url + "/", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, "rag serve to answer")
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def stream_in_thread(url: str) -> tuple[threading.Thread, list[str]]:
    """POST /v1/ask/stream in a thread; the list gets the stream's lines (or `ERROR <exc>` when it breaks)."""
    lines: list[str] = []

    def run() -> None:
        try:
            with httpx.stream("POST", url + "/v1/ask/stream", json={"question": QUESTION}, timeout=GUARD_S) as r:
                lines.extend(r.iter_lines())
        except httpx.HTTPError as exc:
            lines.append(f"ERROR {exc!r}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, lines


def llm_env(fake: FakeOpenAIServer, **extra: str) -> dict[str, str]:
    return {
        "LLM_BASE_URL": fake.base_url,
        "VLLM_PORT": str(fake.port),
        "LLM_MODEL": "fake",
        "LLM_MAX_RETRIES": "0",
        "REFUSAL_MIN_SCORE": "-1",  # the LLM is asked whatever the store holds
    } | extra


def test_sigterm_drains_the_open_stream_answers_503_meanwhile_flushes_spans_and_exits_0(
    settings: Settings, postgres_url: str, triton_server: Settings
) -> None:
    gate = threading.Event()
    held = Reply(text="Yes, it does [1].", gate=gate)
    collector = Collector()
    with FakeOpenAIServer() as fake, ThreadedServer(collector.app) as otlp:
        fake.reset(held)
        env = llm_env(fake, SHUTDOWN_GRACE_S="600", OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url)
        try:
            with rag_serve(settings, env) as (process, url):
                thread, lines = stream_in_thread(url)
                assert held.arrived.wait(GUARD_S), "the answer never reached the LLM"
                process.send_signal(signal.SIGTERM)

                def draining() -> httpx.Response | None:
                    health = httpx.get(url + "/health", timeout=30)
                    return health if health.status_code == 503 else None

                health = wait_for(draining, "/health to report not-ready")
                assert health.json()["error"] == "shutting_down" and "retry-after" in health.headers
                refused = httpx.post(url + "/v1/ask", json={"question": QUESTION}, timeout=30)
                assert refused.status_code == 503 and refused.json()["error"] == "shutting_down"
                assert process.poll() is None and thread.is_alive()  # still held at the gate

                gate.set()
                thread.join(GUARD_S)
                assert "event: result" in lines and not any(line.startswith("ERROR") for line in lines), lines
                assert process.wait(GUARD_S) == 0
                log = process.stdout.read() if process.stdout else ""
        finally:
            gate.set()
    assert b"rag.answer" in b"".join(collector.bodies), log


def test_a_stream_longer_than_the_grace_is_cut_and_the_exit_is_still_0(
    settings: Settings, postgres_url: str, triton_server: Settings
) -> None:
    gate = threading.Event()
    held = Reply(text="Never sent [1].", gate=gate)
    with FakeOpenAIServer() as fake:
        fake.reset(held)
        try:
            with rag_serve(settings, llm_env(fake, SHUTDOWN_GRACE_S="1")) as (process, url):
                thread, lines = stream_in_thread(url)
                assert held.arrived.wait(GUARD_S), "the answer never reached the LLM"
                process.send_signal(signal.SIGTERM)
                assert process.wait(GUARD_S) == 0
                thread.join(GUARD_S)
                assert "event: result" not in lines, lines
                errors = [lines[i + 1] for i, line in enumerate(lines[:-1]) if line == "event: error"]
                assert len(errors) == 1 and "shutting_down" in errors[0], lines  # a last event: retry
        finally:
            gate.set()
