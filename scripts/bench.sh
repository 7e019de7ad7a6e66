#!/usr/bin/env bash
# `make bench`: every benchmark of BENCHMARKS.md, one after the
# other (they measure time: run them on an otherwise idle machine). As root it starts the
# private dockerd (like scripts/test.sh) so that the docker figures are measured too.
# Each bench prints its table and a final JSON line; the logs land in bench/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" RLVR_PROGRESS=0 OMP_NUM_THREADS=1
mkdir -p bench/out
started=0
cleanup() { if [ "$started" = 1 ]; then scripts/dockerd.sh stop || true; fi; }
trap cleanup EXIT
if [ "$(id -u)" = 0 ] && [ "${RLVR_SKIP_DOCKER:-0}" != 1 ] && command -v dockerd >/dev/null 2>&1; then
  eval "$(scripts/dockerd.sh start)"
  started=1
fi
run() { local name=$1; shift; echo "== $name: $*"; "$@" 2>&1 | tee "bench/out/$name.log"; }
run enclave-bwrap python bench/enclave.py
if [ "$started" = 1 ]; then run enclave-docker python bench/enclave.py --backend docker --sizes 20,50; fi
run consensus python bench/consensus.py --trials 1000 --workers 2
run engine python bench/engine.py --threads 1
run grammar python bench/grammar.py $( [ -d models/policy-sft ] && echo --model models/policy-sft )
run synthesize python bench/synthesize.py --workers 1,2
run sft python bench/sft.py --demos 48 --batch 8 --threads 2
run tools python bench/tools.py --backend bwrap --calls 6
run grpo-vs-trl python bench/grpo_vs_trl.py
# the CUDA path beside the CPU one, where this machine has a GPU and a pipeline's models
if python -c "import sys, torch; sys.exit(not torch.cuda.is_available())" && [ -d models/policy-sft ]; then
  run gpu python bench/gpu_check.py --out bench/out/gpu.json
fi
# the checks too slow for CI (marked `slow`: e.g. kill -9 of sft/grpo/evaluate/gate)
run slow-tests python -m pytest -q -m slow tests
