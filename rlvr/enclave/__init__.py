"""Verification enclave (SPEC §4): patch policy, sealed hidden-test runs, verdicts.

Public API (others code against these names):

* `check_patch(task, patch) -> PatchCheck` and `extract_patch(workspace, task)` — the static
  patch policy (policy.py), which runs no code;
* `Enclave(backend, limits, workers, consensus_runs)` with `run_suite` (per-test outcomes,
  trusted side only), `verify` (one `Verdict`, with flaky-test consensus) and `verify_many`;
* `Verdict.public()` — the only thing that leaves the verifier;
* `VERIFIER_VERSION` — changes with the grading semantics and with any byte of the runner,
  server, policy or host code.

The threat model and its residual risks are documented in `_inside/runner.py`.
"""
from rlvr.enclave.core import (
    FAILURE_REASONS,
    VERIFIER_VERSION,
    Enclave,
    SuiteRun,
    Verdict,
    derive_seed,
    task_key,
)
from rlvr.enclave.policy import PatchCheck, check_patch, extract_patch, parse_patch, unified_diff

__all__ = [
    "Enclave", "FAILURE_REASONS", "PatchCheck", "SuiteRun", "VERIFIER_VERSION", "Verdict",
    "check_patch", "derive_seed", "extract_patch", "parse_patch", "task_key", "unified_diff",
]
