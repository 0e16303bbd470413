"""The headless Chromium the browser tests drive, and its arguments."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


