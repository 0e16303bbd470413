"""Tests of `agent/config/` (layout: `tests/__init__.py`)."""
