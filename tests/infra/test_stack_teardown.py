"""A pytest run stops the Postgres and Triton it started however it ends: terminated (SIGTERM, as a CI timeout
does), interrupted (Ctrl-C, SIGINT), interrupted while a server is still starting, or killed (SIGKILL, no teardown at
all: the session's watchdog stops them). Every wait below is on an event (a file the probe writes, a process exit),
bounded only as a safety net."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from agent.config.settings import Settings
from infra import postgres, processes, stack
from infra.config import StackConfig
from tests.conftest import REPO_ROOT, SERVER_ROOT_ENV

pytestmark = pytest.mark.stack

SAFETY_NET_S = 300.0
"""Upper bound of every wait here; reaching it fails the test (none of these waits is expected to come near it)."""


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def wait_for(condition: Callable[[], bool], what: str, run: subprocess.Popen[str] | None = None) -> None:
    """Poll `condition` until it holds; fail naming `what` after `SAFETY_NET_S`, or at once if `run` has exited."""
    deadline = time.monotonic() + SAFETY_NET_S
    while not condition():
        if run is not None and run.poll() is not None:
            output = run.stdout.read() if run.stdout else ""
            raise AssertionError(f"the probe run exited before {what}:\n{output[-3000:]}")
        assert time.monotonic() < deadline, f"not {what} after {SAFETY_NET_S:.0f} s"
        time.sleep(0.2)


class Probe:
    """A `pytest tests/stack_teardown_probe.py` subprocess with its own base temporary directory; whatever it leaves
    running is stopped at the end (`stack.stop_under`), so a failing test leaks nothing either."""

    def __init__(self, tmp_path: Path, servers: Path, stall_triton: bool = False) -> None:
        self.basetemp = tmp_path / "probe"
        self.servers = servers
        self.out = tmp_path / "pids.json"
        env = os.environ | {"RAG_PROBE_OUT": str(self.out), "PYTHONPATH": str(REPO_ROOT)}
        env |= {SERVER_ROOT_ENV: str(servers), "RAG_PROBE_STALL_TRITON": "1" if stall_triton else "0"}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={self.basetemp}"]
        self.run = subprocess.Popen(
            [*command, "tests/stack_teardown_probe.py"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run_dir(self) -> Path | None:
        """The probe session's run dir (PID files), once its data dir exists."""
        found = sorted(self.servers.glob("*/rag-data/run"))
        return found[0] if found else None

    def recorded_pid(self, name: str) -> int | None:
        run_dir = self.run_dir()
        return processes.read_pid(run_dir, name) if run_dir else None

    def stop(self, sig: signal.Signals) -> str:
        """Send `sig` and return the run's output once it has exited."""
        self.run.send_signal(sig)
        output, _ = self.run.communicate(timeout=SAFETY_NET_S)
        return output

    def close(self) -> None:
        if self.run.poll() is None:
            self.run.kill()
            self.run.communicate()
        stack.stop_under(self.servers)
        if self.basetemp.is_dir():
            stack.stop_under(self.basetemp)


@pytest.fixture
def probe(tmp_path: Path, server_dir: Path) -> Iterator[Callable[..., Probe]]:
    started: list[Probe] = []

    def start(stall_triton: bool = False) -> Probe:
        started.append(Probe(tmp_path, server_dir, stall_triton))
        return started[-1]

    yield start
    for p in started:
        p.close()


def assert_all_stopped(pids: dict[str, int], sig: signal.Signals, output: str) -> None:
    def none_alive() -> bool:
        return not any(alive(pid) for pid in pids.values())

    deadline = time.monotonic() + SAFETY_NET_S
    while not none_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {name: pid for name, pid in pids.items() if alive(pid)}
    assert not left, f"still running after {sig.name}: {left}\n{output[-3000:]}"


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"]
)
def test_ended_test_run_stops_its_servers(probe: Callable[..., Probe], sig: signal.Signals) -> None:
    run = probe()
    wait_for(run.out.exists, "the stack started (the probe's PID file)", run.run)
    pids = json.loads(run.out.read_text())
    assert pids["postgres"] and pids["triton"] and all(alive(pid) for pid in pids.values())
    output = run.stop(sig)
    assert_all_stopped(pids, sig, output)
    assert run.run.returncode != 0


def test_interrupted_start_stops_the_server_being_started(probe: Callable[..., Probe]) -> None:
    run = probe(stall_triton=True)  # Triton never reports ready: the run stays in its start-up
    wait_for(lambda: run.recorded_pid("triton") is not None, "Triton spawned (its PID file)", run.run)
    pids = {name: run.recorded_pid(name) for name in ("postgres", "triton")}
    assert pids["postgres"] and pids["triton"]
    output = run.stop(signal.SIGINT)
    assert_all_stopped({k: v for k, v in pids.items() if v}, signal.SIGINT, output)
    assert not run.out.exists()  # the test body never ran: the interrupt came during start-up


def test_postgres_stop_finds_a_server_whose_start_was_interrupted(settings: Settings, server_dir: Path) -> None:
    own = settings.model_copy(update={"data_dir": server_dir})
    config = StackConfig.of(own)
    try:
        pid = postgres.start(config)
        # As if the start had been interrupted after pg_ctl launched the server but before our PID file was written.
        processes.pid_file(config.run_dir, "postgres").unlink()
        assert postgres.postmaster_pid(postgres.pgdata(config)) == pid
        assert postgres.stop(config)
        assert not alive(pid)
    finally:
        postgres.stop(config)
