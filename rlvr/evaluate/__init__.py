"""Policy evaluation (SPEC §8): how good a checkpoint is on each tier of tasks, with intervals.

* `params`  — `EvaluateParams`, the `evaluate` section of params.yaml;
* `sets`    — fixed, seeded evaluation sets per tier (train, heldout_function, heldout,
  regression), the same for every checkpoint;
* `run`     — `evaluate_checkpoint(s)`: roll a checkpoint out on the sets, verify the diffs in
  the enclave with consensus, apply the verdicts, return `schemas.EVAL` rows (the trusted
  loop: only a diff crosses into the enclave);
* `metrics` — pure functions: unbiased pass@k / pass^k, task-clustered intervals, the paired
  comparison of two checkpoints;
* `report`  — eval rows, the per-tier / per-family report, pass@k plots.

Verifier and rollout infra errors are counted apart and never enter a pass-rate denominator.
"""
