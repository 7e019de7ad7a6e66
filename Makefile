# The two set-up commands (README): `make pipeline` runs the whole DAG on the CPU default,
# `make test` runs the test suite (CI calls it through .ci/run). Both install what they need.
.PHONY: pipeline test test-vllm bench env

env:
	scripts/setup_env.sh

pipeline: env
	scripts/pipeline.sh

test: env
	scripts/test.sh

test-vllm: env
	scripts/test_vllm.sh

bench: env
	scripts/bench.sh
