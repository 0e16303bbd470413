"""Tests of `tools/store/` (layout: `tests/__init__.py`)."""
