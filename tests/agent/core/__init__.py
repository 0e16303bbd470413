"""Tests of `agent/core/` (layout: `tests/__init__.py`)."""
