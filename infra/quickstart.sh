#!/usr/bin/env bash
# The main job on the embedded defaults: set up, start the local stack, ingest the bundled SciFact corpus,
# answer one SciFact claim with citations. Idempotent: a second run reuses everything.
# Usage: bash infra/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh
rag=.venv/bin/rag
$rag up
$rag ingest evals/datasets/scifact/corpus.jsonl
$rag ask "${1:-ALDH1 expression is associated with poorer prognosis in breast cancer.}"
echo
echo "The stack keeps running: try '$rag chat', '$rag status'; stop it with '$rag down'."
