#!/usr/bin/env bash
# Run the whole DAG as a DVC experiment under a params preset: presets/NAME.txt holds one
# `dvc exp run -S` override per line (# comments allowed). Stages whose deps and params are
# unchanged are not re-run; `dvc exp show` compares the experiment with the workspace's run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
name="${1:?usage: scripts/pipeline_preset.sh NAME (a file presets/NAME.txt)}"
preset="presets/$name.txt"
[ -f "$preset" ] || { echo "error: $preset: no such preset (presets: $(ls presets | sed 's/\.txt$//' | tr '\n' ' '))" >&2; exit 2; }
args=()
while IFS= read -r line; do
  line="${line%%#*}"; line="$(echo "$line" | xargs)"
  [ -n "$line" ] && args+=(-S "$line")
done < "$preset"
export RLVR_PIPELINE_RUN="${RLVR_PIPELINE_RUN:-preset-$name-$(date -u +%Y%m%dT%H%M%SZ)-$$}"
[ -d .dvc ] || dvc init -q
dvc exp run --name "$name-$(date -u +%Y%m%dT%H%M%S)" "${args[@]}"
rlvr metrics   # the headline numbers (every metric: rlvr metrics --details)
