"""What a package's front door (its `__init__` docstring) lists: one line `- `name`: what it is` per module and
package of its folder. Used by the tests of `tools/` and `agent/core/` that keep those lists complete."""

from __future__ import annotations

import ast
import re
from pathlib import Path

_LISTED = re.compile(r"^- `(?P<name>\w+)`: \S", re.MULTILINE)


def members(folder: Path) -> set[str]:
    """The modules (`*.py` but `__init__.py`) and packages (folders with an `__init__.py`) directly in `folder`."""
    modules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    return modules | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def listed(folder: Path) -> list[str]:
    """The names the docstring of `folder/__init__.py` lists, one `- `name`: ...` line each, in order."""
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
    return [m["name"] for m in _LISTED.finditer(doc)]


def front_door_gaps(folder: Path) -> dict[str, list[str]]:
    """What the front door of `folder` gets wrong: `unlisted` members, `gone` names listed that are no member, and
    `twice` names listed more than once (each sorted; all empty when the list is complete)."""
    names, present = listed(folder), members(folder)
    return {
        "unlisted": sorted(present - set(names)),
        "gone": sorted(set(names) - present),
        "twice": sorted({n for n in names if names.count(n) > 1}),
    }
