"""The machine and software a benchmark's figures come from: one description shared by every benchmark."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution).split("+")[0]
    except metadata.PackageNotFoundError:
        return None


def machine_info(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Date (UTC), CPU model, cores, memory (GiB), 1-minute load average now, platform and the versions of
    Python, ONNX Runtime and torch (read from the installed distributions, nothing imported), plus `extra`."""
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": _version("onnxruntime"),
        "torch": _version("torch"),
        **(extra or {}),
    }
