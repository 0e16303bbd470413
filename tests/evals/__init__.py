"""Tests of `evals/` (layout: `tests/__init__.py`)."""
