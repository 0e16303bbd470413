"""`agent/core/__init__.py` lists every module of `agent/core/`, one line each, and nothing else. No server."""

from __future__ import annotations

from tests.conftest import REPO_ROOT
from tests.front_doors import front_door_gaps, listed


def test_the_front_door_lists_every_module_of_the_core() -> None:
    assert front_door_gaps(REPO_ROOT / "agent" / "core") == {"unlisted": [], "gone": [], "twice": []}
    assert len(listed(REPO_ROOT / "agent" / "core")) > 20
