"""Not collected by default (no `test_` prefix): run by `tests/test_stack_teardown.py` in a pytest subprocess that
is then terminated. It starts Postgres and Triton through the session fixtures, writes their PIDs to the file named
by `RAG_PROBE_OUT`, and waits to be killed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agent.settings import Settings
from infra import processes

pytestmark = pytest.mark.stack


def test_start_the_stack_then_wait(postgres_url: str, triton_server: Settings) -> None:
    run_dir = triton_server.run_dir.resolve()
    pids = {name: processes.read_pid(run_dir, name) for name in ("postgres", "triton")}
    Path(os.environ["RAG_PROBE_OUT"]).write_text(json.dumps(pids))
    time.sleep(600)
