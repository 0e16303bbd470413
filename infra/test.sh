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
# The production files are rendered and checked with real tools (tests/test_production_files.py): `kubectl
# kustomize` for every kustomization (Debian's kubernetes-client when no kubectl is installed) and promtool for the
# alert rules and the Prometheus config. promtool comes unpacked from Debian's prometheus package into .tools/, so
# no Prometheus service is installed or started.
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
if ! command -v kubectl >/dev/null && [ ! -x .tools/usr/bin/kubectl ]; then
  echo "== installing Debian kubernetes-client (kubectl kustomize)"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq kubernetes-client >/dev/null
fi
if ! command -v promtool >/dev/null && [ ! -x .tools/usr/bin/promtool ]; then
  echo "== unpacking promtool from Debian's prometheus package into .tools/"
  $sudo apt-get update -qq
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1)
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root" && mkdir -p .tools/usr/bin
  cp "$tmp/root/usr/bin/promtool" .tools/usr/bin/ && rm -rf "$tmp"
fi
# Debian's pgbouncer 1.18 (Dockerfile.pgbouncer's) runs the shipped pgbouncer.ini in the tests; unpacked the same
# way, so no PgBouncer service is installed or started.
if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ] && [ ! -x .tools/usr/sbin/pgbouncer ]; then
  echo "== unpacking pgbouncer from Debian's package into .tools/"
  $sudo apt-get update -qq
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download pgbouncer >/dev/null 2>&1)
  dpkg-deb -x "$tmp"/pgbouncer_*.deb "$tmp/root" && mkdir -p .tools/usr/sbin
  cp "$tmp/root/usr/sbin/pgbouncer" .tools/usr/sbin/ && rm -rf "$tmp"
fi
# The unpacked binary links libevent and c-ares (plain libraries; installing them starts nothing).
if [ -x .tools/usr/sbin/pgbouncer ] && ldd .tools/usr/sbin/pgbouncer | grep -q "not found"; then
  echo "== installing pgbouncer's libraries (libevent, c-ares)"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends libevent-2.1-7 libc-ares2 >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/lint-imports
.venv/bin/python -m pytest -q "$@"
