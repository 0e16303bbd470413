"""Tests of `tools/extract/` (layout: `tests/__init__.py`)."""
