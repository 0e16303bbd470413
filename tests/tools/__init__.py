"""Tests of `tools/` (layout: `tests/__init__.py`)."""
