"""Locate data shipped inside installed packages without importing them (their `__init__` may need extras)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(name: str) -> Path:
    """Directory of installed top-level package `name`.

    Raises:
        ModuleNotFoundError: the package is not installed; the message names the package.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {name!r} is not installed (install the project with `bash infra/setup.sh`)")
    return Path(next(iter(spec.submodule_search_locations)))
