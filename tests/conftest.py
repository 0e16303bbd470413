"""Session fixtures: a real embedded Postgres, a real Triton with the real ONNX model, and (for `llm` tests) the real
vLLM server, each on free ports in a temporary data dir, always stopped by PID at the end, failures included.

Test tiers: a test is a `stack` test when it needs a real Postgres, Triton or vLLM. Every server fixture below starts
its server only when a test asks for it, and any test that asks for one (directly or through another fixture) is
marked `stack` at collection (`STACK_FIXTURES`), as is every `llm` test; so `pytest -m "not stack"` starts nothing.
The fake OpenAI server (`tests/fake_openai.py`, uvicorn in a thread of the test process) is not a stack server.

A run ended by SIGTERM (a CI timeout) or SIGHUP stops the servers too: those signals are turned into the
KeyboardInterrupt pytest already handles for Ctrl-C (SIGINT), which ends the run and tears down every fixture. A run
that gets no teardown at all (SIGKILL, an out-of-memory kill) is covered by a watchdog process started with the first
server (`server_root`, `infra.watchdog`): once pytest's process is gone it stops every server recorded under this
session's server directory and its temporary directory, by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from types import FrameType

import pytest

from agent.config.settings import Settings
from agent.core.app import build_embedder
from evals.scifact import SCIFACT_DIR
from infra import postgres, stack, triton, vllm, watchdog
from infra.config import StackConfig
from infra.convert_gguf import SERVED_NAME, convert
from infra.processes import free_port
from tests.store_helpers import scratch_databases
from tools.embedder import TritonEmbedder
from tools.embedder.verifier import LOCAL_VERIFIER as SUPPORT_MODEL
from tools.model_specs import get_spec
from tools.store import VectorStore

os.environ["ANSWER_CACHE"] = "false"
"""The answer cache is off in every test's settings and every `rag` process a test starts (they inherit this
environment): tests count LLM calls and ask the same question twice. The cache's own tests turn it on explicitly
(`answer_cache=True`)."""

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The source checkout the tests run from."""
# Test claims whose gold abstract dense retrieval ranks in the top 10 within the test corpus (checked once by
# hand with all-MiniLM-L6-v2; the test asserts it on every run).
GOLD_CLAIMS = {"3": "14717500", "5": "13734012", "36": "5152028", "49": "5953485", "51": "45638119"}
DISTRACTORS = 200


LOADED_MACHINE_TRITON_TIMEOUT_S = 600
"""Per-request Triton deadline (s) of the test ingests that are not about deadlines."""

LOADED_MACHINE_VLLM_START_S = 840
"""How long the `llm` tests wait for vLLM to become ready (s): 84-104 s on a quiet machine, past 7 min when other
jobs load the CPUs; just under pytest's per-test timeout (900 s), which bounds the fixture's setup anyway."""

STACK_FIXTURES = frozenset({"postgres_url", "triton_server", "llm_settings", "own_triton"})
"""Fixtures that start a real server; a test depending on any of them is a `stack` test."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """Turn SIGTERM / SIGHUP into KeyboardInterrupt once (a repeated signal must not break the teardown)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"pytest ended by {signal.Signals(signum).name}")


def pytest_configure(config: pytest.Config) -> None:
    """Install the SIGTERM / SIGHUP handler that stops the stack (see the module docstring), and give SIGINT its
    Ctrl-C meaning when the run inherited it ignored.

    A run started in the background by a non-interactive shell (`pytest &`, `nohup ... &`, a CI script) inherits
    SIGINT ignored, and so would every process it starts: the tests that press Ctrl-C on `rag chat`, `rag ingest`,
    `rag eval answers` or a nested test run (SIGINT) would then interrupt nothing. A Python handler is reset to the
    default disposition in a child at exec, so the children get Ctrl-C's meaning back, as under a terminal."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _interrupt)
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def needs_llm(item: pytest.Item) -> bool:
    """True for a test that needs the real vLLM (the `llm_settings` fixture or the `llm` marker)."""
    return "llm_settings" in getattr(item, "fixturenames", ()) or item.get_closest_marker("llm") is not None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `stack` every test that needs a real server (a `STACK_FIXTURES` fixture, or the `llm` marker), and run
    the modules with a test that needs the real vLLM last (in their order), so that the vLLM `llm_launch` starts at
    the beginning compiles its model while the other tests run. Modules stay whole: their fixtures are set up once."""
    for item in items:
        if STACK_FIXTURES & set(getattr(item, "fixturenames", ())) or needs_llm(item):
            item.add_marker(pytest.mark.stack)
    llm_modules = {item.path for item in items if needs_llm(item)}
    items.sort(key=lambda item: item.path in llm_modules)


SERVER_ROOT_ENV = "RAG_TEST_SERVER_ROOT"
"""Where the session's server directory is made (default: the system temporary directory)."""


@pytest.fixture(scope="session")
def server_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This session's directory for server data dirs (PID files, logs, the embedded Postgres' data), watched by the
    session's watchdog (`infra.watchdog`, log in the base temporary directory), which stops what it holds once this
    process is gone, however it ends.

    It lies outside pytest's `pytest-of-<user>` directory because every pytest session started on the machine resets
    that directory to mode 700, and the embedded Postgres runs as another user (as root it runs as `pgserver`), which
    must reach its data dir. Removed at the end of a session in which no test failed (kept for its logs otherwise).
    """
    parent = Path(os.environ.get(SERVER_ROOT_ENV) or tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="rag-test-servers-", dir=parent))
    basetemp = tmp_path_factory.getbasetemp()
    watchdog.watch(os.getpid(), [root, basetemp], basetemp / "server-watchdog.log")
    yield root
    stack.stop_under(root)  # whatever a test left running
    if not request.session.testsfailed:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A `sleep 120` process of this test (an unrelated process for the pid-file checks), killed afterwards."""
    proc = subprocess.Popen(["sleep", "120"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def server_dir(server_root: Path) -> Path:
    """A new directory for the data dir of a server this test starts itself (see `server_root`)."""
    return Path(tempfile.mkdtemp(prefix="own-", dir=server_root))


@pytest.fixture(scope="session")
def data_dir(server_root: Path) -> Path:
    """The session's data dir."""
    path = server_root / "rag-data"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def settings(data_dir: Path) -> Settings:
    vllm_port = free_port()
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=data_dir,
        triton_grpc_url=f"localhost:{free_port()}",
        triton_http_port=free_port(),
        triton_metrics_port=free_port(),
        vllm_port=vllm_port,
        llm_base_url=f"http://127.0.0.1:{vllm_port}/v1",  # served once a test asks for `llm_settings`
        database_url=None,
        llm_max_tokens=96,
        vllm_start_timeout_s=LOADED_MACHINE_VLLM_START_S,
        # The support check rewrites answers (re-pointed markers, quotes when nothing is supported); the tests of
        # other features assert the scripted models' answers as written. The check's own tests turn it on
        # (tests/agent/core/test_support_stack.py); the session's Triton serves the verifier for them either way.
        support_check="off",
        triton_extra_models=(SUPPORT_MODEL,),
    )


@pytest.fixture(scope="session")
def postgres_url(settings: Settings) -> Iterator[str]:
    try:
        postgres.start(StackConfig.of(settings))
        yield settings.resolved_database_url()
    finally:
        postgres.stop(StackConfig.of(settings))


@pytest.fixture
async def fresh_db(postgres_url: str, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A new, empty database on the test Postgres, named after the test module, dropped afterwards; its URL."""
    prefix = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")[:20]
    async with scratch_databases(postgres_url, prefix) as (url,):
        yield url


@pytest.fixture(scope="session")
def triton_server(settings: Settings) -> Iterator[Settings]:
    try:
        triton.start(StackConfig.of(settings))
        yield settings
    finally:
        triton.stop(StackConfig.of(settings))


def _launch_llm(settings: Settings) -> None:
    """Launch the session's vLLM without waiting; the converted LLM is shared with the project's default data dir
    (conversion takes ~20 s)."""
    llm_dir = settings.data_dir / "llm"
    if not llm_dir.exists():
        llm_dir.symlink_to(convert(REPO_ROOT / ".rag" / "llm" / SERVED_NAME).parent, target_is_directory=True)
    vllm.launch(StackConfig.of(settings))


@pytest.fixture(scope="session", autouse=True)
def llm_launch(request: pytest.FixtureRequest) -> Iterator[None]:
    """In a session with tests that need the real vLLM, launch it before the first test without waiting: its start
    (minutes of model compilation on 2 cores) overlaps the tests that run before those modules (run last,
    `pytest_collection_modifyitems`); `llm_settings` waits for it. Stopped at the session's end, used or not."""
    if not any(needs_llm(item) for item in request.session.items):
        yield
        return
    settings: Settings = request.getfixturevalue("settings")
    try:
        _launch_llm(settings)
        yield
    finally:
        vllm.stop(StackConfig.of(settings))


@pytest.fixture(scope="session")
def llm_settings(settings: Settings) -> Iterator[Settings]:
    """The session's settings once its vLLM (launched by `llm_launch`) is ready."""
    try:
        _launch_llm(settings)
        vllm.start(StackConfig.of(settings))
        yield settings
    finally:
        vllm.stop(StackConfig.of(settings))


@pytest.fixture(scope="session")
async def embedder(triton_server: Settings) -> AsyncIterator[TritonEmbedder]:
    async with build_embedder(triton_server) as emb:
        yield emb


@pytest.fixture(scope="session")
def test_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SciFact subset: the gold abstracts of GOLD_CLAIMS plus the first DISTRACTORS abstracts."""
    wanted = set(GOLD_CLAIMS.values())
    lines = []
    with (SCIFACT_DIR / "corpus.jsonl").open() as handle:
        for i, line in enumerate(handle):
            if i < DISTRACTORS or json.loads(line)["_id"] in wanted:
                lines.append(line)
    path = Path(tmp_path_factory.mktemp("corpus")) / "scifact-subset.jsonl"
    path.write_text("".join(lines))
    return path


@pytest.fixture
def own_triton(settings: Settings, server_dir: Path) -> Iterator[Settings]:
    """A Triton of the test's own (own data dir and free ports), for a test that stops its stub or reloads a model
    with a config that would disturb the session's server; stopped by PID at the end, also when the test fails."""
    own = with_own_triton(settings, server_dir)
    try:
        triton.start(StackConfig.of(own))
        yield own
    finally:
        triton.stop(StackConfig.of(own))


def with_own_triton(settings: Settings, data_dir: Path) -> Settings:
    """`settings` for a Triton of the caller's own: data dir `data_dir` and free gRPC, HTTP and metrics ports."""
    return settings.model_copy(
        update={
            "data_dir": data_dir,
            "triton_grpc_url": f"127.0.0.1:{free_port()}",
            "triton_http_port": free_port(),
            "triton_metrics_port": free_port(),
        }
    )


def cli_env(settings: Settings) -> dict[str, str]:
    """Environment that points the `rag` CLI at the test stack."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "LLM_", "DATABASE_", "VLLM_"))}
    env.update(
        {
            "DATA_DIR": str(settings.data_dir),
            "TRITON_GRPC_URL": settings.triton_grpc_url,
            "TRITON_HTTP_PORT": str(settings.triton_http_port),
            "TRITON_METRICS_PORT": str(settings.triton_metrics_port),
            "VLLM_PORT": str(settings.vllm_port),
            "LLM_BASE_URL": settings.llm_base_url,
            "LLM_MAX_TOKENS": str(settings.llm_max_tokens),
            "SUPPORT_CHECK": settings.support_check,
        }
    )
    return env


def run_cli(
    settings: Settings, *args: str, cwd: Path | None = None, extra_env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `rag ARGS` in a subprocess against the test stack (`extra_env` added to `cli_env`); the 1800 s timeout
    only ends a hung command."""
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        env=cli_env(settings) | dict(extra_env or {}),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
    )


@pytest.fixture(scope="session")
async def ingested(postgres_url: str, embedder: TritonEmbedder, settings: Settings, test_corpus: Path) -> str:
    """The test corpus ingested through the CLI once per session; returns the database URL.

    Each Triton request may take up to `LOADED_MACHINE_TRITON_TIMEOUT_S`: on a loaded machine the run's last requests
    wait in Triton's queue longer than the default deadline, which is a setting, not what these tests are about.
    """
    deadline = {"TRITON_TIMEOUT_S": str(LOADED_MACHINE_TRITON_TIMEOUT_S)}
    result = run_cli(settings, "ingest", str(test_corpus), extra_env=deadline)
    assert result.returncode == 0, result.stderr
    return postgres_url


@pytest.fixture
async def store(ingested: str, settings: Settings) -> AsyncIterator[VectorStore]:
    spec = get_spec(settings.embedder_model)
    async with VectorStore(ingested, spec.name, spec.dim) as st:
        yield st
