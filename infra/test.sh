#!/usr/bin/env bash
# The test command: set up (idempotent), lint and type-check, then the test suite against a real Postgres, Triton
# and vLLM that the tests start on free ports and stop themselves.
# Usage: bash infra/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest -q "$@"
