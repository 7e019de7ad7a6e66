"""Verification enclave (SPEC §4): patch policy, sealed hidden-test runs, verdicts.

Public API (others code against these names):

* the static patch policy that `verify` applies first (`check_patch`, which runs no code)
  and `extract_patch` live in `rlvr.tasks.patches`, which the agent uses without importing
  the enclave;
* `Enclave(backend, limits, workers, consensus_runs)` with `run_suite` (per-test outcomes,
  trusted side only), `verify` (one `Verdict`, with flaky-test consensus) and `verify_many`;
* `Verdict.public()` — the only thing that leaves the verifier; its `reason` is one of
  `rlvr.artifacts.schemas.VERDICT_REASONS`;
* `VERIFIER_VERSION` — changes with the grading semantics and with any byte of the runner,
  server, host code or patch module (`rlvr/tasks/patches.py`).

The threat model and its residual risks are documented in `_inside/runner.py`.
"""
from rlvr.enclave.core import VERIFIER_VERSION, Enclave, SuiteRun, Verdict, run_seed, task_key

__all__ = ["Enclave", "SuiteRun", "VERIFIER_VERSION", "Verdict", "run_seed", "task_key"]
