"""Tests of `infra/` (layout: `tests/__init__.py`)."""
