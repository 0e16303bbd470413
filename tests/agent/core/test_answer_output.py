"""What `rag ask` prints besides the answer when the LLM server is less complete than vLLM: nothing raw."""

from __future__ import annotations

import subprocess
import sys

from agent.config.settings import Settings
from tests.conftest import cli_env
from tests.fake_openai import FakeOpenAIServer, Reply


def test_an_llm_server_without_token_usage_prints_no_raw_library_warning(ingested: str, settings: Settings) -> None:
    with FakeOpenAIServer() as fake:
        requests = fake.reset(Reply(text="Vitamin D is discussed in the passages [1].", usage=False))
        own = settings.model_copy(update={"llm_base_url": fake.base_url, "vllm_port": fake.port})
        env = cli_env(own) | {"LLM_MODEL": "fake", "LLM_MAX_RETRIES": "0", "REFUSAL_MIN_SCORE": "-1"}
        result = subprocess.run(
            [sys.executable, "-m", "agent", "ask", "What do the documents say about vitamin D?"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert len(requests) == 1
    assert result.returncode == 0, result.stderr
    assert "Vitamin D is discussed" in result.stdout
    assert "Warning" not in result.stderr and "site-packages" not in result.stderr, result.stderr
