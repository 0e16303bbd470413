"""`rag up` reports each service as it starts and once it is ready, in order, instead of one silent wait."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from agent.settings import Settings
from infra import stack
from infra.config import StackConfig
from infra.processes import free_port
from tests.conftest import cli_env


def test_up_reports_each_service_as_it_starts_and_when_it_is_ready(settings: Settings, server_dir: Path) -> None:
    own = settings.model_copy(
        update={
            "data_dir": server_dir,
            "triton_grpc_url": f"127.0.0.1:{free_port()}",
            "triton_http_port": free_port(),
            "triton_metrics_port": free_port(),
        }
    )
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
