"""Tests of `agent/` (layout: `tests/__init__.py`)."""
