"""PID records name one process across clock adjustments, and never another process under a reused PID."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import processes


def test_a_pid_record_still_names_its_process_after_the_clock_moves(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    processes.write_pid(tmp_path, "svc", sleeper.pid)
    path = processes.pid_file(tmp_path, "svc")
    record = json.loads(path.read_text())
    # Linux recomputes the boot time from the wall clock on every read, in whole seconds: after a clock adjustment
    # the epoch start time of the same process reads one second off.
    path.write_text(json.dumps(record | {"create_time": record["create_time"] + 1.0}))
    assert processes.read_pid(tmp_path, "svc") == sleeper.pid


def test_a_pid_record_of_another_start_names_no_process(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    processes.write_pid(tmp_path, "svc", sleeper.pid)
    path = processes.pid_file(tmp_path, "svc")
    record = json.loads(path.read_text())
    path.write_text(json.dumps(record | {"since_boot_s": record["since_boot_s"] - 30.0}))  # the PID, reused
    assert processes.read_pid(tmp_path, "svc") is None
    assert not path.exists()
    assert sleeper.poll() is None


class _FixedPorts:
    """A stand-in for `socket.socket` whose binds to port 0 get the ports of `ports` in turn."""

    def __init__(self, ports: Iterator[int]) -> None:
        self.ports = ports
        self.port = 0

    def __call__(self) -> _FixedPorts:
        return self

    def __enter__(self) -> _FixedPorts:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def bind(self, address: tuple[str, int]) -> None:
        self.port = next(self.ports)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_free_port_never_hands_out_a_port_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # The OS may give a just-closed port again: two services must still get two ports.
    monkeypatch.setattr(processes, "_HANDED_OUT", set())
    monkeypatch.setattr("infra.processes.socket.socket", _FixedPorts(iter([40001, 40001, 40001, 40002])))
    assert [processes.free_port(), processes.free_port()] == [40001, 40002]
