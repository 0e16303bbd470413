"""Background processes tracked by PID file: start detached, wait until healthy, stop by PID.

Each service runs in its own process session (`start_new_session=True`), so its PID is also its process-group id
and stopping it signals that group only (vLLM's engine workers included). Nothing is ever stopped by name, and
nothing is signalled unless the PID file's start time and command line match the live process (`PidRecord`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

log = logging.getLogger(__name__)


class ServiceError(RuntimeError):
    """A local service could not be started, reached or stopped; the message says which and why."""


def pid_file(run_dir: Path, name: str) -> Path:
    """Path of service `name`'s PID file in `run_dir`."""
    return run_dir / f"{name}.pid"


def log_file(run_dir: Path, name: str) -> Path:
    """Path of service `name`'s log file in `run_dir`."""
    return run_dir / f"{name}.log"


START_MATCH_S = 0.05
"""Largest difference (s) between a recorded and a live start time for the two to be one process (the kernel counts
start times in clock ticks of 10 ms)."""


@dataclass(frozen=True)
class PidRecord:
    """What a PID file holds (JSON): the PID, the process start time (psutil `create_time`, seconds since the epoch),
    its start time counted from boot (`since_boot_s`) and its command line. A PID alone is not enough: PID files
    outlive reboots and PIDs are reused, so a file is trusted only while a process with that PID and start time runs
    (PID + start time identify one process; the command line is recorded for the messages, not compared, because
    servers may rewrite their process title).

    The comparison uses `since_boot_s`: the kernel records a start in ticks since boot, and `create_time` adds the
    boot time, which Linux recomputes from the wall clock on every read (`btime`, whole seconds), so `create_time`
    of one process jumps by a second whenever the clock is adjusted across a boundary. Files without `since_boot_s`
    (written before it existed) are compared by `create_time`."""

    pid: int
    create_time: float
    cmdline: list[str]
    since_boot_s: float | None = None


def _since_boot_s(pid: int) -> float | None:
    """Start of process `pid` in seconds since boot: field 22 (`starttime`, clock ticks) of `/proc/<pid>/stat`
    (proc(5)), which no clock adjustment changes; None where there is no such file."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _identity(pid: int) -> PidRecord | None:
    """The live process `pid` as a `PidRecord`, or None when there is none (zombies count as gone)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        try:
            cmdline = proc.cmdline()
        except psutil.AccessDenied:
            cmdline = []
        return PidRecord(pid, proc.create_time(), cmdline, _since_boot_s(pid))
    except psutil.NoSuchProcess:
        return None


def read_pid(run_dir: Path, name: str) -> int | None:
    """PID of service `name` when its PID file names that live process, else None.

    A file naming no live process, another process under a reused PID (another start time), or in an older
    plain-PID form is removed with a warning on the `infra.processes` logger; nothing is signalled.
    """
    path = pid_file(run_dir, name)
    try:
        raw = json.loads(path.read_text())
        since_boot = raw.get("since_boot_s")
        record = PidRecord(
            int(raw["pid"]),
            float(raw["create_time"]),
            [str(part) for part in raw["cmdline"]],
            float(since_boot) if since_boot is not None else None,
        )
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        text = path.read_text().strip()
        why = (
            f"the older plain-PID form ({text}), which cannot tell a reused PID from {name}"
            if text.isdigit()
            else f"unreadable: {exc}"
        )
        log.warning("%s: PID file removed, %s; if %s still runs, stop it by its PID", path, why, name)
        path.unlink(missing_ok=True)
        return None
    live = _identity(record.pid)
    if live is None:
        log.warning("%s: stale PID file removed (%s, pid %d, is not running)", path, name, record.pid)
    elif not _same_start(live, record):
        log.warning(
            "%s: stale PID file removed: pid %d is now another process (started %s, %s), not %s; not signalled",
            path,
            record.pid,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(live.create_time)),
            " ".join(live.cmdline)[:120] or "command line unreadable",
            name,
        )
    else:
        return record.pid
    path.unlink(missing_ok=True)
    return None


def _same_start(live: PidRecord, record: PidRecord) -> bool:
    """True when `record` was written for the running process `live` (see `PidRecord`)."""
    if record.since_boot_s is not None and live.since_boot_s is not None:
        return abs(live.since_boot_s - record.since_boot_s) <= START_MATCH_S
    return abs(live.create_time - record.create_time) <= START_MATCH_S


def write_pid(run_dir: Path, name: str, pid: int) -> None:
    """Record live process `pid` as service `name`'s (JSON: pid, start time, command line).

    Raises:
        ServiceError: `pid` is not running.
    """
    live = _identity(pid)
    if live is None:
        raise ServiceError(f"{name}: process {pid} exited before its PID file was written")
    run_dir.mkdir(parents=True, exist_ok=True)
    pid_file(run_dir, name).write_text(json.dumps(asdict(live)) + "\n")


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def require_free_ports(service: str, ports: Mapping[str, int]) -> None:
    """Raise `ServiceError` naming the setting and port when one of `ports` is already taken.

    Args:
        service: service name for the message.
        ports: setting name -> TCP port.
    """
    taken = {name: port for name, port in ports.items() if port_in_use(port)}
    if taken:
        detail = ", ".join(f"port {port}, set by {name}" for name, port in taken.items())
        raise ServiceError(
            f"{service}: port already in use ({detail}); stop what listens there or set another port "
            f"(environment variable of the same name)"
        )


def spawn(
    run_dir: Path, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None, nice: int = 0
) -> int:
    """Start `argv` detached in its own session, output to `<run_dir>/<name>.log`; record and return its PID.

    `nice` (0-19) is added to the process's niceness before it runs, so it and every process it starts get the CPU
    after the processes at niceness 0 (Linux CFS weights: 1024 at 0, 335 at 5, 110 at 10).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    log = log_file(run_dir, name).open("ab")
    # coreutils `nice` sets the niceness and execs the command in place: same PID, no preexec_fn (unsafe in a
    # process with threads, e.g. a progress bar's).
    command = ["nice", "-n", str(nice), *argv] if nice else list(argv)
    proc = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    log.close()
    with contextlib.suppress(ServiceError):  # exited at once: `wait_until_ready` reports it with the log tail
        write_pid(run_dir, name, proc.pid)
    return proc.pid


def log_tail(run_dir: Path, name: str, lines: int = 30) -> str:
    """Last `lines` lines of service `name`'s log ('' when there is none)."""
    path = log_file(run_dir, name)
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_until_ready(
    name: str, check: Callable[[], bool], timeout_s: float, pid: int | None = None, run_dir: Path | None = None
) -> None:
    """Poll `check` every 0.5 s until it returns True.

    Raises:
        ServiceError: `timeout_s` seconds passed, or process `pid` exited first (with its log's tail).
    """

    def ready() -> bool:
        if pid is not None and not psutil.pid_exists(pid):
            raise ServiceError(f"{name} exited during start-up. Log tail:\n{_tail(run_dir, name)}")
        if pid is not None and psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            raise ServiceError(f"{name} exited during start-up. Log tail:\n{_tail(run_dir, name)}")
        try:
            return check()
        except Exception:  # noqa: BLE001 - not ready yet
            return False

    poll = Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(0.5), retry=retry_if_result(lambda ok: not ok))
    try:
        poll(ready)
    except RetryError:
        raise ServiceError(f"{name} not ready after {timeout_s:.0f} s. Log tail:\n{_tail(run_dir, name)}") from None


def _tail(run_dir: Path | None, name: str) -> str:
    return log_tail(run_dir, name) if run_dir is not None else ""


def stop_pid(pid: int, timeout_s: float = 30.0, sig: int = signal.SIGTERM) -> None:
    """Signal process group `pid` (falling back to the process), wait, then SIGKILL whatever is left.

    The service's children (same session) are collected first so none is left behind.
    """
    try:
        proc = psutil.Process(pid)
        family = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            return
    _, alive = psutil.wait_procs(family, timeout=timeout_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


def stop_service(run_dir: Path, name: str, timeout_s: float = 30.0, sig: int = signal.SIGTERM) -> bool:
    """Stop service `name` by the PID in its PID file; True if one was running."""
    pid = read_pid(run_dir, name)
    pid_file(run_dir, name).unlink(missing_ok=True)
    if pid is None:
        return False
    stop_pid(pid, timeout_s=timeout_s, sig=sig)
    return True


_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()
FREE_PORT_TRIES = 100


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now on `host` (the OS picks it by binding port 0), never one this process was
    given before: the OS may hand a just-closed port out again, so two calls in a row (Triton's HTTP port, then
    vLLM's) could otherwise name the same port. Another process may take it before the caller binds it; callers
    start their server right away.

    Raises:
        OSError: no such port within `FREE_PORT_TRIES` bindings.
    """
    with _HANDED_OUT_LOCK:
        for _ in range(FREE_PORT_TRIES):
            with socket.socket() as sock:
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise OSError(f"no free TCP port on {host} that this process was not given before ({FREE_PORT_TRIES} tries)")
