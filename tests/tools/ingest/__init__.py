"""Tests of `tools/ingest/` (layout: `tests/__init__.py`)."""
