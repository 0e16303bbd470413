"""The command-line tools that only the test command installs (`bash infra/test.sh`: Debian's `chromium`,
`tesseract` and `kubectl`, `promtool` and `pgbouncer` unpacked into `.tools/`, npm's axe-core installed there),
found for the tests that run them.

After `bash infra/quickstart.sh` alone they are missing, and a test that needs one is skipped with the reason. Under
CI (`CI=true`, as `.ci/run` runs), where infra/test.sh has installed them, a missing tool fails the test instead:
there it means the install step broke, which a skip would hide.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TOOLS_DIR = REPO_ROOT / ".tools"
"""Where infra/test.sh unpacks the tools it takes out of Debian packages without installing them."""
CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium (infra/test.sh installs it): prints PDFs and runs the web page tests, driven by Playwright."""


def under_ci() -> bool:
    """Whether this run is CI's (`CI=true`, any case)."""
    return os.environ.get("CI", "").lower() == "true"


def require_tool(name: str, install: str, *extra_dirs: Path) -> str:
    """The path of the executable `name` (a name looked up on PATH and then in `extra_dirs`, or an absolute path).

    Skips the calling test when it is missing, naming `install` (how infra/test.sh gets it); under CI fails it.
    """
    search = os.pathsep.join([os.environ.get("PATH", ""), *map(str, extra_dirs)])
    found = shutil.which(name, path=search)
    if found:
        return found
    message = f"no {name}: {install}"
    if under_ci():
        pytest.fail(f"{message} (CI=true: infra/test.sh should have installed it)", pytrace=False)
    pytest.skip(f"{message}; `bash infra/test.sh` installs it (under CI=true a missing tool fails)")


def chromium() -> str:
    """Debian's chromium, or skip (fail under CI)."""
    return require_tool(CHROMIUM, "apt-get install -y chromium (Debian package)")


def tesseract() -> str:
    """Debian's tesseract (tesseract-ocr, with English), or skip (fail under CI)."""
    return require_tool("tesseract", "apt-get install -y tesseract-ocr (Debian package)")


def kubectl() -> str:
    """`kubectl` (Debian's kubernetes-client), or skip (fail under CI)."""
    return require_tool("kubectl", "apt-get install kubernetes-client", TOOLS_DIR / "usr" / "bin")


def promtool() -> str:
    """`promtool` from Debian's prometheus package (unpacked into .tools/), or skip (fail under CI)."""
    return require_tool("promtool", "unpacked from Debian's prometheus package into .tools/", TOOLS_DIR / "usr" / "bin")


def pgbouncer() -> str:
    """Debian's pgbouncer (the 1.18 of Dockerfile.pgbouncer), installed or unpacked into .tools/, or skip (fail under
    CI)."""
    install = "unpacked from Debian's pgbouncer package into .tools/"
    return require_tool("pgbouncer", install, Path("/usr/sbin"), TOOLS_DIR / "usr" / "sbin")


AXE_CORE = TOOLS_DIR / "node_modules" / "axe-core" / "axe.min.js"
"""axe-core's browser script (npm `axe-core`, installed into .tools/ by infra/test.sh): the accessibility check."""


def axe_core() -> Path:
    """The path of axe-core's `axe.min.js`, or skip (fail under CI)."""
    if AXE_CORE.is_file():
        return AXE_CORE
    message = f"no {AXE_CORE}: npm install --prefix .tools axe-core@4.14.1"
    if under_ci():
        pytest.fail(f"{message} (CI=true: infra/test.sh should have installed it)", pytrace=False)
    pytest.skip(f"{message}; `bash infra/test.sh` installs it (under CI=true a missing tool fails)")
