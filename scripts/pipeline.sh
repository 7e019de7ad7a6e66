#!/usr/bin/env bash
# Run the whole DAG (dvc repro) on the CPU default, then show its headline metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
# One MLflow parent run for this whole invocation (rlvr/tracking/pipeline.py)
export RLVR_PIPELINE_RUN="${RLVR_PIPELINE_RUN:-make-$(date -u +%Y%m%dT%H%M%SZ)-$$}"
[ -d .dvc ] || dvc init -q
dvc repro "$@"
# The headline numbers, one per line (every metric: rlvr metrics --details, MLflow)
echo "== headline metrics (metrics/*.json; details in reports/stages/)"
rlvr metrics
# autostage is off (.dvc/config): the lock and the git-tracked metrics / plots / reports it
# names are left unstaged alike; this commits a run's results together.
echo "To commit this run's results: git add dvc.lock metrics plots reports && git commit"
