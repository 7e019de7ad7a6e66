#!/usr/bin/env bash
# Run the whole DAG (dvc repro) on the CPU default, then show its metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
[ -d .dvc ] || dvc init -q
dvc repro "$@"
dvc metrics show
