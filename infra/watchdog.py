"""A watchdog that stops the local services a process started once that process is gone, however it ended.

`python -m infra.watchdog PID CREATE_TIME ROOT...` waits until process PID (the one created at CREATE_TIME, psutil
`create_time`, seconds since the epoch) has exited, then stops every service recorded under each ROOT
(`infra.stack.stop_under`: PID files, and embedded Postgres data dirs) and exits. The test suite starts one per
session (`watch`), so that Postgres (which `pg_ctl` detaches), Triton and vLLM are stopped even when pytest is killed
with SIGKILL and no teardown runs. The watchdog runs in its own session: Ctrl-C in the terminal, or a signal to the
watched process' group, does not reach it.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import psutil

from infra import stack

log = logging.getLogger(__name__)


def wait_for_exit(pid: int, create_time: float) -> None:
    """Return once the process `pid` created at `create_time` has exited (at once when it already has, or when the
    PID now names another process)."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 0.05:
            return
        proc.wait()
    except psutil.NoSuchProcess:
        return


def watch(pid: int, roots: Sequence[Path], log_path: Path) -> subprocess.Popen[bytes]:
    """Start a detached watchdog for process `pid` (which must be running) over the directories `roots`; its log goes
    to `log_path`.

    Raises:
        psutil.NoSuchProcess: `pid` is not running.
    """
    create_time = psutil.Process(pid).create_time()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "infra.watchdog", str(pid), repr(create_time), *map(str, roots)]
    with log_path.open("ab") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); exit code 0."""
    parser = argparse.ArgumentParser(prog="python -m infra.watchdog", description=__doc__.splitlines()[0])
    parser.add_argument("pid", type=int, help="the process to wait for")
    parser.add_argument("create_time", type=float, help="its creation time (psutil create_time, s since the epoch)")
    parser.add_argument("roots", type=Path, nargs="+", help="stop every local service recorded under these")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    wait_for_exit(args.pid, args.create_time)
    stopped = [name for root in args.roots if root.is_dir() for name in stack.stop_under(root)]
    log.info("process %d exited; stopped %s", args.pid, ", ".join(stopped) or "nothing (all were stopped already)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
