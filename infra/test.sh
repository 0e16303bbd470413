#!/usr/bin/env bash
# The test command: set up (idempotent), lint and type-check, then the test suite against a real Postgres, Triton
# and vLLM that the tests start on free ports and stop themselves.
# Usage: bash infra/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
# The web chat page is tested in headless Debian Chromium (driven by the playwright package from the dev extra).
if [ ! -x /usr/bin/chromium ]; then
  echo "== installing Debian chromium for the browser test"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/lint-imports
.venv/bin/python -m pytest -q "$@"
