"""A pytest run that is terminated (SIGTERM, as a CI timeout does) stops the Postgres and Triton it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.stack


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_terminated_test_run_stops_its_servers(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "pids.json"
    env = os.environ | {"RAG_PROBE_OUT": str(out), "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/stack_teardown_probe.py"]
    run = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while not out.exists():
            assert run.poll() is None, run.stdout.read() if run.stdout else ""
            assert time.monotonic() < deadline, "the probe did not start the stack within 240 s"
            time.sleep(0.5)
        time.sleep(0.5)
        pids = json.loads(out.read_text())
        assert pids["postgres"] and pids["triton"] and all(alive(pid) for pid in pids.values())
        run.send_signal(sig)
        output, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = {name: pid for name, pid in pids.items() if alive(pid)}
    assert not left, f"still running after {sig.name}: {left}\n{output[-2000:]}"
    assert run.returncode != 0
