"""`rag sync` as a user runs it, against the real Postgres and Triton: `--dry-run` lists and writes nothing, a sync
prints its summary, a second run embeds nothing, a file that cannot be read fails alone with exit code 1, and
`--watch` syncs again on a change and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest

from agent.config.settings import Settings
from tests.conftest import REPO_ROOT, cli_env, run_cli

WAIT_S = 600
"""A bound on waiting for the watching process (the outcome does not depend on it)."""

LINE_WAIT_S = 180
"""A bound on waiting for one report line of the watching process: a missed event fails the test instead of hanging
the run (the outcome does not depend on it)."""


def line_reader(stream: Iterable[str]) -> queue.Queue[str]:
    """The lines of `stream`, read by a daemon thread as they come."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def next_report(lines: queue.Queue[str], what: str) -> dict[str, object]:
    """The next JSON report line; the test fails when none comes within `LINE_WAIT_S`."""
    try:
        report: dict[str, object] = json.loads(lines.get(timeout=LINE_WAIT_S))
    except queue.Empty:
        pytest.fail(f"`rag sync --watch` printed no report {what} within {LINE_WAIT_S} s")
    return report


def test_sync_dry_run_then_sync_then_nothing_to_do(fresh_db: str, triton_server: Settings, tmp_path: Path) -> None:
    env = {"DATABASE_URL": fresh_db}  # a database of its own: the session's shared test store keeps its documents
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nThe narwhal backup job runs every night at two.\n")
    (folder / "b.txt").write_text("The okapi gateway listens on port 8080.\n")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\n% truncated")
    (folder / "anim.gif").write_bytes(b"GIF89a" + bytes(range(256)))  # GIF: not a synced type
    args = ("sync", str(folder), "--collection", "sync-cli", "--json")

    dry = run_cli(triton_server, *args, "--dry-run", extra_env=env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["added"] == ["a.md", "b.txt", "broken.pdf"]
    listed = run_cli(triton_server, "docs", "list", "--collection", "sync-cli", "--json", extra_env=env)
    assert json.loads(listed.stdout) == []

    first = run_cli(triton_server, *args, extra_env=env)
    assert first.returncode == 1, first.stderr  # broken.pdf failed alone
    report = json.loads(first.stdout)
    assert report["added"] == ["a.md", "b.txt"] and [f["path"] for f in report["failed"]] == [
        str((folder / "broken.pdf").resolve())
    ]
    (folder / "broken.pdf").unlink()
    second = run_cli(triton_server, *args, extra_env=env)
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert (again["embed_calls"], again["unchanged"], again["added"]) == (0, 2, [])
    assert [f["path"] for f in again["skipped"]] == [str((folder / "anim.gif").resolve())]


def test_watch_syncs_a_change_and_stops_on_sigterm(fresh_db: str, triton_server: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "watched"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nHerons fish at dawn.\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "sync", str(folder), "--collection", "sync-watch", "--watch", "--json"],
        env={**cli_env(triton_server), "DATABASE_URL": fresh_db},
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = line_reader(process.stdout)
        assert next_report(lines, "of the first sync")["added"] == ["a.md"]
        (folder / "b.md").write_text("# Beta\n\nOtters float on their backs.\n")
        assert next_report(lines, "after b.md was written")["added"] == ["b.md"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "stopped after" in (process.stderr.read() if process.stderr else "")
