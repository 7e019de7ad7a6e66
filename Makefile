# The two set-up commands (README): `make pipeline` runs the whole DAG on the CPU default,
# `make test` runs the test suite (CI calls it through .ci/run). Both install what they need.
.PHONY: pipeline pipeline-tiny-qwen3 test test-vllm bench env

env:
	scripts/setup_env.sh

pipeline: env
	scripts/pipeline.sh

# The DAG on a real-format model (presets/tiny-qwen3.txt): the tiny Qwen3 is built offline
# from the pinned tokenizer package, then the DAG runs as a DVC experiment under the preset.
pipeline-tiny-qwen3: env
	.venv/bin/python -m rlvr.engines.tiny_model models/tiny-qwen3
	scripts/pipeline_preset.sh tiny-qwen3

test: env
	scripts/test.sh

test-vllm: env
	scripts/test_vllm.sh

bench: env
	scripts/bench.sh
