"""The interfaces without servers: failure classification and HTTP status table, plain-text printing of model and
document text, one-line CLI errors that fail before any server is needed, PID files against reused PIDs."""

from __future__ import annotations

import io
import json
import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import psutil
import pytest
from pydantic import ValidationError
from rich.console import Console

from agent.cli.chat import print_sources, show_event
from agent.config.settings import Settings
from agent.core.errors import AnswerLimitError, InputError, LLMConfigError, LLMUnavailableError
from agent.core.events import ToolCall, ToolResult
from agent.core.failures import describe
from agent.core.results import AskResult, Citation
from agent.http.ask import AskRequest
from agent.http.errors import STATUS_OF_KIND, error_response
from infra import processes, stack
from infra.config import StackConfig
from tests.conftest import REPO_ROOT
from tools.errors import (
    EmbedderError,
    EmbedderOverloadedError,
    StoreBusyError,
    StoreError,
    StoreQueryError,
    StoreUnavailableError,
)
from tools.ingest import IngestError
from tools.store import VectorStore

BRACKET_TITLE = "Scratch space under [/tmp] and [/var]"
BRACKET_ANSWER = "Use [/INST] the [bold]scratch[/] space [/tmp] [1]."


def rag(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`rag ARGS` in a subprocess with no local stack behind it (DATA_DIR is empty)."""
    clean = {
        k: v for k, v in os.environ.items() if k not in {"EMBEDDER_MODEL", "TOP_K", "DATABASE_URL", "REFUSAL_MIN_SCORE"}
    }
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        env=clean | {"PYTHONPATH": str(REPO_ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr


def test_failures_map_to_kinds_and_http_statuses() -> None:
    cases: list[tuple[BaseException, str, int]] = [
        (AnswerLimitError("timeout", "answer took longer than 1 s"), "timeout", 504),
        (AnswerLimitError("requests", "4 requests"), "limit_exceeded", 422),
        (LLMUnavailableError("refused"), "llm_unavailable", 503),
        (LLMConfigError("no tools"), "llm_misconfigured", 503),
        (EmbedderError("Triton down"), "retrieval_unavailable", 503),
        (EmbedderOverloadedError("queue full"), "embedder_overloaded", 503),
        (StoreError("cannot connect"), "store_error", 503),
        (InputError("top_k must be >= 1"), "bad_request", 422),
        (IngestError("corpus.jsonl line 3: not JSON"), "bad_request", 422),
        (StoreUnavailableError("connection refused"), "postgres_unavailable", 503),
        (StoreBusyError("no pooled connection within 5 s"), "postgres_busy", 503),
        (StoreQueryError('type "vector" does not exist'), "postgres_error", 500),
        (LookupError("no tokenizer"), "config_error", 500),
        (ExceptionGroup("group", [RuntimeError("?"), EmbedderError("down")]), "retrieval_unavailable", 503),
    ]
    for exc, kind, status in cases:
        failure = describe(exc)
        assert failure is not None and failure.kind == kind, (exc, failure)
        assert STATUS_OF_KIND[kind] == status
        assert "\n" not in failure.message
    assert describe(KeyError("bug")) is None and describe(TypeError("bug")) is None
    assert describe(ValueError("a bug in our own code")) is None  # only the checked inputs are client errors
    response = error_response(describe(EmbedderError("Triton down")))  # type: ignore[arg-type]
    assert response.status_code == 503 and response.headers["retry-after"].isdigit()
    assert json.loads(bytes(response.body)) == {"error": "retrieval_unavailable", "detail": "Triton down"}
    overloaded = error_response(describe(EmbedderOverloadedError("queue full")))  # type: ignore[arg-type]
    assert overloaded.status_code == 503 and overloaded.headers["retry-after"].isdigit()
    assert "retry-after" not in error_response(describe(InputError("bad"))).headers  # type: ignore[arg-type]
    assert "retry-after" not in error_response(describe(StoreQueryError("bad"))).headers  # type: ignore[arg-type]


async def test_a_missing_postgres_socket_is_postgres_unavailable(tmp_path: Path) -> None:
    """The embedded Postgres' socket disappears while it restarts: the store says Postgres is unavailable."""
    store = VectorStore(f"postgresql://postgres@/postgres?host={tmp_path / 'gone'}", "m", 4, acquire_timeout_s=5)
    with pytest.raises(StoreUnavailableError) as info:
        await store.connect()
    failure = describe(info.value)
    assert failure is not None and failure.kind == "postgres_unavailable" and failure.retryable
    assert describe(FileNotFoundError(2, "No such file", "model.onnx")).kind == "os_error"  # type: ignore[union-attr]
    assert describe(asyncpg.ConnectionDoesNotExistError("closed")) is None  # a driver error the store did not wrap


def test_settings_errors_name_the_environment_variable() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, top_k=500)  # type: ignore[call-arg]
    failure = describe(info.value)
    assert failure is not None and failure.kind == "invalid_settings"
    assert failure.message.startswith("invalid settings: TOP_K: ") and "less than or equal to 100" in failure.message


def test_ask_request_rejects_nul_and_blank_questions() -> None:
    for question in ("what is \x00 this", "   "):
        with pytest.raises(ValidationError):
            AskRequest(question=question)
    assert AskRequest(question="fine").question == "fine"


def test_model_and_document_text_is_printed_as_plain_text() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    result = AskResult(
        answer=BRACKET_ANSWER,
        citations=[Citation(doc_id="d[/x]", chunk_id="d[/x]#0", score=0.5, passage=1, title=BRACKET_TITLE)],
        timings_ms={"total": 1.0},
    )
    show_event(console, ToolCall(tool="search_documents", args={"query": "[/INST] [bold]q"}))
    show_event(console, ToolResult(tool="search_documents", summary="1 passage [/tmp]"))
    console.print(result.answer, markup=False)
    print_sources(console, result)
    text = out.getvalue()
    for literal in (BRACKET_TITLE, BRACKET_ANSWER, "[/INST] [bold]q", "1 passage [/tmp]", "doc d[/x]"):
        assert literal in text
    assert "answer cache" not in text


def test_an_answer_from_the_cache_says_so() -> None:
    out = io.StringIO()
    result = AskResult(answer="Yes [1].", citations=[], timings_ms={"cache": 2.0, "total": 2.5}, cached=True)
    print_sources(Console(file=out, width=200, color_system=None), result)
    assert "from the answer cache (ANSWER_CACHE): cache 2 ms, total 2 ms" in out.getvalue()


def test_cli_errors_are_one_line_without_servers(tmp_path: Path) -> None:
    data = str(tmp_path)
    assert_one_line_error(rag("up", "--only", "postgrs", DATA_DIR=data), "unknown service(s) postgrs")
    assert_one_line_error(rag("ask", "hi", DATA_DIR=data, TOP_K="500"), "invalid settings: TOP_K")
    no_tokenizer = rag("ask", "hi", DATA_DIR=data, EMBEDDER_MODEL="bge-large-en-v1.5", REFUSAL_MIN_SCORE="0.5")
    assert_one_line_error(no_tokenizer, "EMBEDDER_TOKENIZER")
    assert_one_line_error(rag("ask", "  ", DATA_DIR=data), "QUESTION is empty")
    debug = rag("--debug", "ask", "  ", DATA_DIR=data)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_pid_file_records_start_time_and_command_line(tmp_path: Path) -> None:
    pid = processes.spawn(tmp_path, "svc", ["sleep", "120"])
    record = json.loads(processes.pid_file(tmp_path, "svc").read_text())
    assert record["pid"] == pid
    assert record["cmdline"] in (["sleep", "120"], [])  # [] when /proc was read before the exec finished
    assert record["create_time"] == pytest.approx(psutil.Process(pid).create_time())
    assert processes.read_pid(tmp_path, "svc") == pid
    assert processes.stop_service(tmp_path, "svc", timeout_s=10)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def read_fifo(fd: int, timeout_s: float) -> str:
    """What was written to the FIFO open for reading at `fd` until its writer closed it. Open `fd` (O_NONBLOCK)
    before the writer starts: Linux then reports it not readable until a writer came and wrote or went, so each wait
    is on the writer, not on a clock. `timeout_s` is only a safety net: reaching it fails the test."""
    chunks: list[bytes] = []
    while select.select([fd], [], [], timeout_s)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:  # the writer closed it
            return b"".join(chunks).decode()
        chunks.append(chunk)
    raise AssertionError(f"nothing wrote and closed the FIFO within {timeout_s:.0f} s")


def test_a_service_spawned_nice_runs_at_that_niceness_under_its_own_pid(tmp_path: Path) -> None:
    fifo = tmp_path / "report"
    os.mkfifo(fifo)
    report = f'echo "$(nice) $$" > {fifo}; exec sleep 120'  # its niceness and PID, then it stays until stopped
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the reader exists before the service: its write never blocks
    try:
        pid = processes.spawn(tmp_path, "svc", ["sh", "-c", report], nice=7)
        niceness, own_pid = read_fifo(fd, timeout_s=120).split()
        expected = min(psutil.Process().nice() + 7, 19)
        assert int(niceness) == expected
        assert int(own_pid) == pid  # `nice` exec'd the command: the recorded PID is the service's own
        assert psutil.Process(pid).nice() == expected  # still running (it sleeps until stopped): not a reused PID
    finally:
        os.close(fd)
        processes.stop_service(tmp_path, "svc", timeout_s=10)


def test_a_reused_pid_is_never_signalled(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    run_dir = settings.run_dir.resolve()
    run_dir.mkdir(parents=True)
    started = psutil.Process(sleeper.pid).create_time()
    stale = {"pid": sleeper.pid, "create_time": started - 3600.0, "cmdline": ["tritonserver", "--model-repository"]}
    processes.pid_file(run_dir, "triton").write_text(json.dumps(stale))
    processes.pid_file(run_dir, "vllm").write_text(f"{sleeper.pid}\n")  # the older plain form: unverifiable
    with caplog.at_level(logging.WARNING, logger="infra.processes"):
        stopped = stack.down(StackConfig.of(settings))
    assert stopped == []
    time.sleep(0.2)
    assert sleeper.poll() is None, "the unrelated process was signalled"
    assert not processes.pid_file(run_dir, "triton").exists() and not processes.pid_file(run_dir, "vllm").exists()
    assert "stale PID file removed" in caplog.text and "older plain-PID form" in caplog.text


def test_rag_down_reports_a_stale_pid_file(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    started = psutil.Process(sleeper.pid).create_time()
    stale = {"pid": sleeper.pid, "create_time": started - 60.0, "cmdline": ["tritonserver"]}
    processes.pid_file(run_dir, "triton").write_text(json.dumps(stale))
    result = rag("down", DATA_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "stale PID file removed" in result.stderr and "nothing was running" in result.stdout
    assert sleeper.poll() is None


def test_ingest_ceiling_is_a_flag_that_names_what_it_could_not_measure(tmp_path: Path) -> None:
    from agent.core.wiring import build_embedder
    from evals.ingest_ceiling import ceiling_line

    embedder = build_embedder(Settings(_env_file=None, data_dir=tmp_path))  # type: ignore[call-arg]
    assert ceiling_line(tmp_path / "model.onnx", embedder, 10.0, ["a chunk"]).endswith(
        f"no model file {tmp_path}/model.onnx"
    )
    assert "embedded no chunks" in ceiling_line(tmp_path / "model.onnx", embedder, 10.0, [])
    help_text = subprocess.run(
        [sys.executable, "-m", "agent", "ingest", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"},
    ).stdout
    assert "--ceiling" in help_text and "--no-ceiling" in help_text and "default: no-ceiling" in help_text
