"""Every artifact's pyarrow schema and data contract, in one place.

Stages exchange only these tables; a later stage can rely on a column because it is here.
"""
from __future__ import annotations

import pyarrow as pa

from rlvr.artifacts.contracts import between, in_set, nonempty_string, not_null, register, unique

FILES = pa.list_(pa.struct([("path", pa.string()), ("content", pa.string())]))
QUARANTINE = pa.list_(pa.struct([("test_id", pa.string()), ("reason", pa.string())]))

SPLITS = ("train", "heldout", "regression")
TASK_SOURCES = ("authored", "synthetic", "swebench")

# ---- tasks (curate, synthesize) ----------------------------------------------------------
TASKS = pa.schema(
    [
        ("task_id", pa.string()),
        ("family", pa.string()),
        ("split", pa.string()),
        ("source", pa.string()),
        ("instruction", pa.string()),
        ("repo_files", FILES),
        ("public_tests", pa.list_(pa.string())),
        ("hidden_tests", FILES),
        ("reference_patch", pa.string()),
        ("fail_to_pass", pa.list_(pa.string())),
        ("pass_to_pass", pa.list_(pa.string())),
        ("quarantined", QUARANTINE),
        ("provenance", pa.string()),
        ("checks", pa.string()),
        ("snapshot_hash", pa.string()),
        ("hidden_hash", pa.string()),
        ("reference_hash", pa.string()),
        ("content_hash", pa.string()),
    ]
)
register("tasks", [
    *not_null("task_id", "family", "split", "source", "instruction", "reference_patch",
              "content_hash"),
    unique("task_id"),
    unique("content_hash"),
    nonempty_string("task_id"),
    nonempty_string("instruction"),
    nonempty_string("reference_patch"),
    in_set("split", SPLITS),
    in_set("source", TASK_SOURCES),
])

# ---- rejection log (curate, synthesize): nothing is dropped silently ----------------------
REJECTION_REASONS = (
    "malformed",            # task directory / record unusable
    "pristine_passes",      # rule 1: the buggy state is not rejected by the hidden suite
    "reference_fails",      # rule 2: the reference is not accepted
    "wrong_solution_passes",  # rule 3: empty / stub / other mutant / test-editing patch accepted
    "nondeterministic_reference",  # rule 4: every FAIL_TO_PASS test flaky -> nothing to grade
    "no_pass_to_pass",      # rule 5: no regression guard
    "instruction_leaks",    # rule 6: the instruction contains the reference fix
    "duplicate",            # same normalised content as an accepted task
    "equivalent_mutant",    # synthesis: no test fails on the mutant
    "invalid_mutant",       # synthesis: mutant does not compile / import
    "split_leak",           # a held-out family's content would reach training
)
REJECTIONS = pa.schema(
    [
        ("task_id", pa.string()),
        ("family", pa.string()),
        ("source", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("provenance", pa.string()),
    ]
)
register("rejections", [
    *not_null("task_id", "reason", "detail"),
    in_set("reason", REJECTION_REASONS),
])

# ---- candidate patches and verdicts (verify) ----------------------------------------------
PATCHES = pa.schema(
    [
        ("task_id", pa.string()),
        ("candidate_id", pa.string()),
        ("origin", pa.string()),   # reference | empty | rollout:<trajectory_id> | ...
        ("patch", pa.string()),
    ]
)
register("patches", [*not_null("task_id", "candidate_id", "patch"), unique("candidate_id"),
                     nonempty_string("candidate_id")])

VERDICT_REASONS = ("none", "patch_rejected", "apply_failed", "tests_failed", "timeout",
                   "resource_limit", "infra_error")
VERDICTS = pa.schema(
    [
        ("task_id", pa.string()),
        ("candidate_id", pa.string()),
        ("origin", pa.string()),
        ("success", pa.bool_()),
        ("reason", pa.string()),
        ("runs", pa.int32()),
        ("verifier_version", pa.string()),
        ("wall_seconds", pa.float64()),
        ("resources", pa.string()),
        ("safety_flags", pa.list_(pa.string())),
        ("seed", pa.int64()),
    ]
)
register("verdicts", [
    *not_null("task_id", "candidate_id", "success", "reason", "verifier_version"),
    unique("candidate_id"),
    in_set("reason", VERDICT_REASONS),
    between("runs", 0, None),
])
