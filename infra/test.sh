#!/usr/bin/env bash
# The test command: set up (idempotent), lint and type-check, then the test suite against a real Postgres, Triton
# and vLLM that the tests start on free ports and stop themselves.
# Usage: bash infra/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
# Debian packages for the tests, installed or unpacked once. apt takes its own locks and fails at once when another
# apt runs (two test runs set up at the same time: "Unable to lock directory /var/lib/apt/lists/"), so every apt
# call of this script waits for the others under one lock file.
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
apt_get() { flock "${TMPDIR:-/tmp}/rag-test-apt.lock" $sudo apt-get "$@"; }
# The web chat page is tested in headless Debian Chromium (driven by the playwright package from the dev extra).
if [ ! -x /usr/bin/chromium ]; then
  echo "== installing Debian chromium for the browser test"
  apt_get update -qq && apt_get install -y -qq chromium >/dev/null
fi
# The web page's accessibility check (tests/agent/http/test_web_accessibility.py) injects axe-core into Chromium: the
# npm package, pinned, installed into .tools/ (not vendored: 650 KB of minified script).
if [ ! -f .tools/node_modules/axe-core/axe.min.js ]; then
  echo "== installing axe-core (npm) for the web page's accessibility test"
  if ! command -v npm >/dev/null; then apt_get update -qq && apt_get install -y -qq npm >/dev/null; fi
  npm install --silent --no-save --no-audit --no-fund --prefix .tools axe-core@4.14.1 >/dev/null
fi
# OCR (tools/extract/ocr.py) runs Debian's tesseract with its English data (tesseract-ocr pulls tesseract-ocr-eng).
if ! command -v tesseract >/dev/null; then
  echo "== installing Debian tesseract-ocr for the OCR tests"
  apt_get update -qq && apt_get install -y -qq tesseract-ocr >/dev/null
fi
# The production files are rendered and checked with real tools (tests/infra/test_production_files.py): `kubectl
# kustomize` for every kustomization (Debian's kubernetes-client when no kubectl is installed) and promtool for the
# alert rules and the Prometheus config. promtool comes unpacked from Debian's prometheus package into .tools/, so
# no Prometheus service is installed or started.
if ! command -v kubectl >/dev/null && [ ! -x .tools/usr/bin/kubectl ]; then
  echo "== installing Debian kubernetes-client (kubectl kustomize)"
  apt_get update -qq && apt_get install -y -qq kubernetes-client >/dev/null
fi
if ! command -v promtool >/dev/null && [ ! -x .tools/usr/bin/promtool ]; then
  echo "== unpacking promtool from Debian's prometheus package into .tools/"
  apt_get update -qq
  tmp="$(mktemp -d)"
  (cd "$tmp" && flock "${TMPDIR:-/tmp}/rag-test-apt.lock" apt-get download prometheus >/dev/null 2>&1)
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root" && mkdir -p .tools/usr/bin
  cp "$tmp/root/usr/bin/promtool" .tools/usr/bin/ && rm -rf "$tmp"
fi
# Debian's pgbouncer 1.18 (Dockerfile.pgbouncer's) runs the shipped pgbouncer.ini in the tests; unpacked the same
# way, so no PgBouncer service is installed or started.
if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ] && [ ! -x .tools/usr/sbin/pgbouncer ]; then
  echo "== unpacking pgbouncer from Debian's package into .tools/"
  apt_get update -qq
  tmp="$(mktemp -d)"
  (cd "$tmp" && flock "${TMPDIR:-/tmp}/rag-test-apt.lock" apt-get download pgbouncer >/dev/null 2>&1)
  dpkg-deb -x "$tmp"/pgbouncer_*.deb "$tmp/root" && mkdir -p .tools/usr/sbin
  cp "$tmp/root/usr/sbin/pgbouncer" .tools/usr/sbin/ && rm -rf "$tmp"
fi
# The unpacked binary links libevent and c-ares (plain libraries; installing them starts nothing).
# (ldd's output is read whole first: `ldd | grep -q` under pipefail fails when grep stops reading early)
if [ -x .tools/usr/sbin/pgbouncer ] && [[ "$(ldd .tools/usr/sbin/pgbouncer 2>&1 || true)" == *"not found"* ]]; then
  echo "== installing pgbouncer's libraries (libevent, c-ares)"
  apt_get update -qq && apt_get install -y -qq --no-install-recommends libevent-2.1-7 libc-ares2 >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/lint-imports
# The documentation site (mkdocs.yml, docs/): strict, so a broken link, anchor or missing page fails the run; built
# into a temporary folder, removed afterwards. (Not --quiet: it hides the warnings that --strict counts.)
site="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$site"
rm -rf "$site"
.venv/bin/python -m pytest -q "$@"
