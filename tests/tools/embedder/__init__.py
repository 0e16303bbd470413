"""Tests of `tools/embedder/` (layout: `tests/__init__.py`)."""
