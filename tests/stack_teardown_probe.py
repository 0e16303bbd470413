"""Not collected by default (no `test_` prefix): run by `tests/infra/test_stack_teardown.py` in a pytest subprocess that
is then interrupted or killed. It starts Postgres and Triton through the session fixtures, writes their PIDs to the
file named by `RAG_PROBE_OUT`, and waits to be stopped.

With `RAG_PROBE_STALL_TRITON=1`, Triton never reports ready here (its readiness check is replaced), so the run stays
in the `triton_server` fixture's start-up: the test then interrupts a run that is starting a server.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from agent.config.settings import Settings
from infra import processes, triton
from infra.config import StackConfig

pytestmark = pytest.mark.stack

if os.environ.get("RAG_PROBE_STALL_TRITON") == "1":

    def never_ready(config: StackConfig) -> bool:
        return False

    triton.is_ready = never_ready


def test_start_the_stack_then_wait(postgres_url: str, triton_server: Settings) -> None:
    run_dir = triton_server.run_dir.resolve()
    pids = {name: processes.read_pid(run_dir, name) for name in ("postgres", "triton")}
    out = Path(os.environ["RAG_PROBE_OUT"])
    written = out.with_name(out.name + ".part")
    written.write_text(json.dumps(pids))
    os.replace(written, out)  # whole or absent: the test reads it as soon as it exists
    threading.Event().wait()  # until the run is interrupted or killed
