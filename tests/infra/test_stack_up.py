"""`rag up` reports each service as it starts and once it is ready, in order, instead of one silent wait."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from agent.config.settings import Settings
from infra import stack
from infra.config import StackConfig
from tests.conftest import cli_env, with_own_triton


def test_up_reports_each_service_as_it_starts_and_when_it_is_ready(settings: Settings, server_dir: Path) -> None:
    own = with_own_triton(settings, server_dir)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "agent", "up", "--only", "postgres", "--only", "triton"],
            env=cli_env(own),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, in the order written
            text=True,
            timeout=600,
        )
    finally:
        stack.down(StackConfig.of(own))
    assert result.returncode == 0, result.stdout
    events = re.findall(r"^(starting|ready) (postgres|triton)\b", result.stdout, flags=re.MULTILINE)
    assert events == [("starting", "postgres"), ("ready", "postgres"), ("starting", "triton"), ("ready", "triton")]
    assert re.search(r"^ready triton \(pid \d+\) in \d+\.\d s$", result.stdout, flags=re.MULTILINE), result.stdout
