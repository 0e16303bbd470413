"""Tests of `agent/cli/` (layout: `tests/__init__.py`)."""
