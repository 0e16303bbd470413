"""Tests of `tools/jobs/` (layout: `tests/__init__.py`)."""
