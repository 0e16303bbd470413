"""The test run's signal set-up (`tests/conftest.py`), without servers: a run started in the background still gives
the processes it starts Ctrl-C's meaning for SIGINT, which the interruption tests send them."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

CHILD = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
"""A Python child that says whether SIGINT is its KeyboardInterrupt (Python installs that only when SIGINT was not
ignored at its start)."""

RUN = f"""
import signal, subprocess, sys
from tests.conftest import pytest_configure
print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
pytest_configure(None)
print(subprocess.run([sys.executable, "-c", {CHILD!r}], capture_output=True, text=True, check=True).stdout.strip())
"""
"""Stands in for a test run: the conftest's configuration, then a child process of the kind a test interrupts."""


def test_a_run_started_in_the_background_gives_its_children_ctrl_c() -> None:
    # A non-interactive shell starts its background jobs with SIGINT ignored (POSIX), as a CI script or `nohup ... &`.
    result = subprocess.run(
        ["bash", "-c", '"$0" -c "$1" & wait $!', sys.executable, RUN],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    ignored_at_start, child_has_ctrl_c = result.stdout.split()
    assert ignored_at_start == "True", result.stdout  # the case under test really arose
    assert child_has_ctrl_c == "True", result.stdout + result.stderr
