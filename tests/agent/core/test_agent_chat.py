"""`rag chat` and `rag ask` in subprocesses against the real stack: streamed answers with tool activity and sources,
refusals, Ctrl-C cancelling one answer, limits reported as one readable line."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from agent.config.settings import Settings
from agent.core.prompts import REFUSAL
from evals.off_topic import OFF_TOPIC as OFF_TOPIC_QUESTIONS
from tests.conftest import cli_env
from tools.store import VectorStore

pytestmark = [pytest.mark.stack, pytest.mark.llm]

CLAIM = "A deficiency of vitamin B12 increases blood levels of homocysteine."
OFF_TOPIC = OFF_TOPIC_QUESTIONS[0]  # "Who won the 2018 FIFA World Cup?"


def rag(settings: Settings, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        env=cli_env(settings) | env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_chat_streams_tool_activity_sources_and_refusals(llm_settings: Settings, store: VectorStore) -> None:
    result = rag(llm_settings, "chat", "--top-k", "3", stdin=f"{CLAIM}\n\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"→ search_documents(query={CLAIM!r}, top_k=3)" in out
    assert "← 3 passages [1], [2], [3], best similarity" in out
    assert out.index("search_documents") < out.index("llm_ttft")  # activity before the answer's timings
    # a new conversation: inside the first, the off-topic question would be searched together with the claim
    off_topic = rag(llm_settings, "chat", "--top-k", "3", stdin=f"{OFF_TOPIC}\n\n")
    assert off_topic.returncode == 0, off_topic.stderr
    assert REFUSAL in off_topic.stdout and "no sources: no retrieved passage is relevant enough" in off_topic.stdout
    assert "Traceback" not in out + result.stderr + off_topic.stdout + off_topic.stderr


def test_limits_and_bad_policy_are_one_readable_line(llm_settings: Settings, store: VectorStore) -> None:
    chat = rag(llm_settings, "chat", stdin=f"{CLAIM}\n{OFF_TOPIC}\n\n", ANSWER_TOKEN_BUDGET="50")
    assert chat.returncode == 0, chat.stderr
    assert "error: the answer exceeded its token budget of 50 tokens (ANSWER_TOKEN_BUDGET)" in chat.stdout
    assert REFUSAL in chat.stdout  # the session went on to the next question
    ask = rag(llm_settings, "ask", CLAIM, ANSWER_TOKEN_BUDGET="50")
    assert ask.returncode == 1 and "ANSWER_TOKEN_BUDGET" in ask.stderr
    bad = rag(llm_settings, "ask", "--policy", "sometimes", CLAIM)
    assert bad.returncode == 2 and "'sometimes'" in bad.stderr  # a usage error: the choices are named
    for run in (chat, ask, bad):
        assert "Traceback" not in run.stdout + run.stderr


def test_ctrl_c_cancels_the_answer_not_the_session(llm_settings: Settings, store: VectorStore) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "chat"],
        env=cli_env(llm_settings) | {"LLM_MAX_TOKENS": "256"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in process.stdout or []:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: list[str] = []

    def wait_for(text: str, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in seen):
            seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))

    try:
        process.stdin.write(CLAIM + "\n")
        process.stdin.flush()
        wait_for("← ")  # retrieval done, the model is writing
        process.send_signal(signal.SIGINT)
        wait_for("answer cancelled")
        process.stdin.write(OFF_TOPIC + "\n\n")
        process.stdin.flush()
        assert process.wait(timeout=120) == 0
        reader.join(timeout=10)
        while not lines.empty():
            seen.append(lines.get_nowait())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    out = "".join(seen)
    assert REFUSAL in out.split("answer cancelled", 1)[1]  # the next question was still answered
    assert "Traceback" not in out
