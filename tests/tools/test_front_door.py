"""`tools/__init__.py` lists every module and package of `tools/`, one line each, and nothing else. No server."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.front_doors import front_door_gaps, listed


def test_the_front_door_lists_every_module_of_tools() -> None:
    assert front_door_gaps(REPO_ROOT / "tools") == {"unlisted": [], "gone": [], "twice": []}
    assert len(listed(REPO_ROOT / "tools")) > 25


def test_a_missing_or_stale_line_is_found(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text('"""Parts:\n\n- `a`: one.\n- `gone`: was here.\n- `a`: again.\n"""\n')
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "data").mkdir()  # no __init__.py: not a package
    assert front_door_gaps(tmp_path) == {"unlisted": ["b", "pkg"], "gone": ["gone"], "twice": ["a"]}
