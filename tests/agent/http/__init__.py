"""Tests of `agent/http/` (layout: `tests/__init__.py`)."""
