"""Start-up check of the originals folder: with `KEEP_ORIGINALS` on, `rag serve` and `rag worker` refuse to start
when `ORIGINALS_DIR` cannot be written (instead of logging a warning on every upload and answering "no original file
kept" for every page image), and say what to do. Root ignores permission bits, so an unwritable folder is made here
as a path under a regular file (the same OSError path as a root-owned volume for uid 10001)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.jobs import run_workers
from agent.config.settings import Settings
from agent.core.wiring import check_originals
from agent.http.app import create_app
from tools.originals import Originals, OriginalsNotWritableError


def unwritable(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return blocker / "originals"


def test_writable_root_is_created_and_left_clean(tmp_path: Path) -> None:
    root = tmp_path / "originals"
    Originals(root).check_writable()
    assert root.is_dir() and list(root.iterdir()) == []


def test_unwritable_root_fails_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(OriginalsNotWritableError, match=r"KEEP_ORIGINALS is on but ORIGINALS_DIR .* not writable"):
        Originals(unwritable(tmp_path)).check_writable()


async def test_serve_start_up_fails_when_originals_cannot_be_written(tmp_path: Path) -> None:
    settings = Settings(keep_originals=True, originals_dir=unwritable(tmp_path))
    app = create_app(settings)
    with pytest.raises(OriginalsNotWritableError, match="KEEP_ORIGINALS=false"):
        async with app.router.lifespan_context(app):
            pass


async def test_worker_start_up_fails_when_originals_cannot_be_written(tmp_path: Path) -> None:
    settings = Settings(keep_originals=True, originals_dir=unwritable(tmp_path))
    with pytest.raises(OriginalsNotWritableError):
        await run_workers(settings, 1)


def test_originals_off_skips_the_check(tmp_path: Path) -> None:
    check_originals(Settings(keep_originals=False, originals_dir=unwritable(tmp_path)))
