"""Every artifact's pyarrow schema and data contract, in one place.

Stages exchange only these tables; a later stage can rely on a column because it is here.
"""
from __future__ import annotations

import pyarrow as pa

from rlvr.artifacts.contracts import (between, in_set, nonempty_string, not_null, register,
                                      unique, unique_together)

FILES = pa.list_(pa.struct([("path", pa.string()), ("content", pa.string())]))
QUARANTINE = pa.list_(pa.struct([("test_id", pa.string()), ("reason", pa.string())]))

SPLITS = ("train", "heldout_function", "heldout", "regression")  # rlvr.tasks.splits
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
        # exact pins `name==version` of the tested code's own dependencies (the sandbox's
        # task layer, rlvr.sandbox.envs); [] = none
        ("dependencies", pa.list_(pa.string())),
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
    "hidden_import_error",  # a hidden test module collects no tests on the reference fix
    "flaky_suite",          # the reference's runs disagree beyond quarantine (rule 4)
    "public_tests_unrunnable",  # the agent's run_tests cannot run the public tests
)
REJECTIONS = pa.schema(
    [
        ("task_id", pa.string()),
        ("family", pa.string()),
        ("source", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("provenance", pa.string()),
        ("tests", pa.list_(pa.string())),   # the test ids at fault (named, not counted)
        ("flags", pa.list_(pa.string())),   # the enclave's safety flags of the deciding runs
        ("error", pa.string()),             # a short error line
    ]
)
register("rejections", [
    *not_null("task_id", "reason", "detail"),
    in_set("reason", REJECTION_REASONS),
])

# ---- synthesis yield table (synthesize: plots/synthesize_yield.csv, for `dvc plots`) ---------
# One row per (family, operator); a `rejected_<reason>` column per rejection reason seen.
register("synth_yield", [
    *not_null("family", "operator", "candidates", "accepted", "yield"),
    nonempty_string("family"), nonempty_string("operator"),
    between("candidates", 1), between("accepted", 0), between("yield", 0.0, 1.0),
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

# ---- trajectories (rollout): the rollout passport, one row per episode (SPEC §3) ------------
# Owned by rlvr/agent (passport.py builds rows, checks alignment and rebuilds derived fields).
STOP_REASONS = ("submitted", "max_turns", "max_tokens", "repetition", "invalid_action_limit",
                "infra_error")
TRUNCATION_SOURCES = ("", "max_turns", "max_tokens", "observation")
LOGPROB_KINDS = ("behaviour", "none")  # none: a text teacher's tokens (SFT only, never RL)
TURN = pa.struct(
    [
        ("turn", pa.int32()),
        ("policy_version", pa.string()),
        ("sample_seed", pa.int64()),
        ("action_text", pa.string()),
        ("action_valid", pa.bool_()),
        ("action_error_kind", pa.string()),
        ("action_error", pa.string()),
        ("tool_name", pa.string()),
        ("tool_args", pa.string()),        # JSON of the parsed args ("" when invalid)
        ("finish_reason", pa.string()),    # stop | length
        ("gen_tokens", pa.int32()),
        ("logprob_sum", pa.float64()),     # sum of this turn's behaviour logprobs (NaN: teacher)
        ("observation", pa.string()),      # as shown to the agent (capped)
        ("observation_raw_chars", pa.int32()),  # length before the cap
        ("observation_truncated", pa.bool_()),
        ("tool_status", pa.string()),      # ok | error | timeout | infra_error | submitted | invalid | none
        ("sampled_by", pa.string()),       # the server that sampled the turn ("" = in process)
    ]
)
TRAJECTORIES = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("group_id", pa.string()),
        ("task_id", pa.string()),
        ("sample_index", pa.int32()),
        ("family", pa.string()),
        ("split", pa.string()),
        ("env_id", pa.string()),
        ("env_version", pa.string()),
        ("reset_seed", pa.int64()),
        ("initial_state_checksum", pa.string()),
        ("engine", pa.string()),
        ("policy_version", pa.string()),           # of the first turn (a weights hash)
        ("policy_step", pa.int64()),               # its ordinal: 0 = initial policy (teachers: 0)
        ("turn_policy_versions", pa.list_(pa.string())),
        ("decoding", pa.string()),                 # JSON: temperature, top_p, top_k, grammar, stop ids
        ("decoding_seed", pa.int64()),             # the run seed every sampling seed derives from
        ("budgets", pa.string()),                  # JSON of the episode budgets
        ("repetition", pa.string()),               # JSON of the repetition-guard params
        ("token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float64())),      # behaviour logprobs; 0 on context, NaN: teacher
        ("logprobs_kind", pa.string()),
        ("turn_ids", pa.list_(pa.int32())),        # -1 = initial prompt
        ("turns", pa.list_(TURN)),
        ("n_turns", pa.int32()),
        ("n_tokens", pa.int32()),
        ("n_prompt_tokens", pa.int32()),
        ("n_trainable_tokens", pa.int32()),
        ("n_tokens_before_truncation", pa.int32()),
        ("n_invalid_actions", pa.int32()),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("truncation_source", pa.string()),
        ("infra_error", pa.bool_()),
        ("stop_reason", pa.string()),
        ("stop_detail", pa.string()),
        ("reward_format", pa.float64()),           # R_format: share of valid actions
        ("reward_length", pa.float64()),           # |tau_gen| / T_max
        ("reward_lambda_fmt", pa.float64()),
        ("reward_alpha", pa.float64()),
        ("reward_t_max", pa.int32()),
        ("reward_outcome", pa.float64()),          # null until known (verify fills it)
        ("reward", pa.float64()),                  # null until reward_outcome is known
        ("verifier_version", pa.string()),         # null until verified
        ("verdict_reason", pa.string()),           # VERDICT_REASONS; null: no verdict (see passport)
        ("patch", pa.string()),                    # extract_patch of the final workspace
        ("patch_ok", pa.bool_()),
        ("patch_reason", pa.string()),
        ("patch_check", pa.string()),              # JSON of the PatchCheck
        # (wall-clock measurements are in the timings sidecar: TRAJECTORY_TIMINGS)
    ]
)
register("trajectories", [
    # Column rules only: per-row consistency (token alignment, masks, logprob sums, stop
    # reason, reward) is rlvr.agent.passport.check_alignment / rebuild_check. Kept short:
    # each expectation costs ~60 ms of validation.
    *not_null("trajectory_id", "group_id", "task_id", "stop_reason"),
    unique("trajectory_id"),
    in_set("stop_reason", STOP_REASONS),
    in_set("truncation_source", TRUNCATION_SOURCES),
    in_set("logprobs_kind", LOGPROB_KINDS),
    in_set("verdict_reason", VERDICT_REASONS),  # nulls pass: not verified / nothing submitted
    between("n_trainable_tokens", 0, None),
    between("reward_format", 0.0, 1.0),
])

# ---- evaluation (evaluate): one row per evaluated episode (SPEC §8) -------------------------
# Owned by rlvr/evaluate. A checkpoint's rows for one tier are the same (task_id, seed) set as
# every other checkpoint's (paired comparison). `success` is null exactly when the episode
# or its verification ended in an infra error: such a row is counted apart and never enters
# a pass-rate denominator.
EVAL_TIERS = ("train", "heldout_function", "heldout", "regression")  # nearest first (§8)
EVAL = pa.schema(
    [
        ("checkpoint", pa.string()),       # name of the evaluated checkpoint (evaluate.checkpoints)
        ("run", pa.string()),              # training run / seed it belongs to ("" = one run)
        ("tier", pa.string()),
        ("family", pa.string()),
        ("task_id", pa.string()),
        ("sample_index", pa.int32()),
        ("seed", pa.int64()),              # the episode's sample (reset) seed: same for every checkpoint
        ("success", pa.bool_()),           # verified success; null = infra error
        ("infra_error", pa.bool_()),
        ("verdict_reason", pa.string()),   # VERDICT_REASONS, or "not_submitted" (no verdict needed)
        ("safety_flags", pa.list_(pa.string())),  # the enclave's flags on its verdict, sorted
        ("stop_reason", pa.string()),
        ("n_turns", pa.int32()),
        ("n_invalid_actions", pa.int32()),  # turns whose action did not parse (passport.invalid_turns)
        ("n_trainable_tokens", pa.int32()),  # policy-generated tokens
        ("n_tokens", pa.int32()),            # whole transcript
        ("trajectory_id", pa.string()),
        ("policy_version", pa.string()),
        ("policy_step", pa.int64()),
    ]
)
register("eval", [
    *not_null("checkpoint", "tier", "family", "task_id", "sample_index", "seed", "infra_error",
              "stop_reason", "trajectory_id", "policy_version"),
    # trajectory ids repeat across checkpoints by design (same task, seed, index): the key
    # is the checkpoint's run + the episode
    unique_together("checkpoint", "run", "trajectory_id"),
    in_set("tier", EVAL_TIERS),
    in_set("stop_reason", STOP_REASONS),
    between("sample_index", 0, None),
    between("n_turns", 0, None),
    between("n_invalid_actions", 0, None),
    between("n_trainable_tokens", 0, None),
])

# ---- timings sidecars (rollout, verify, evaluate) -------------------------------------------
# What varies between two identical runs (wall-clock and CPU seconds, peak memory, start
# times) lives beside an artifact, never in it: `<artifact>.timings.parquet`
# (`io.timings_path`), keyed like its artifact's rows and written by the same stage. The
# artifact itself is then a function of its inputs (same inputs -> byte-identical file), so
# a rerun on another machine leaves every downstream stage's DVC dependencies unchanged.
# No stage depends on a sidecar; reports read it for their cost numbers (metrics only).
TRAJECTORY_TIMINGS = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("tool_latency_s", pa.list_(pa.float64())),  # per turn: the tool call (0: none)
        ("gen_seconds", pa.list_(pa.float64())),     # per turn: the generate call it joined
        ("started_at", pa.float64()),                # unix time the episode started
        ("wall_seconds", pa.float64()),              # start -> workspace released
    ]
)
TRAJECTORY_TIMING_COLUMNS = tuple(TRAJECTORY_TIMINGS.names[1:])
register("trajectory_timings", [
    *not_null("trajectory_id", "wall_seconds"),
    unique("trajectory_id"),
    between("wall_seconds", 0.0, None),
])
# A rollout checkpoint shard (rlvr.agent.rollout) holds a passport with its timings, so a
# resumed run reports the timings of the groups it did not redo; never a DVC artifact.
TRAJECTORY_SHARD = pa.schema(list(TRAJECTORIES) + list(TRAJECTORY_TIMINGS)[1:])

VERDICT_TIMINGS = pa.schema(
    [
        ("candidate_id", pa.string()),
        ("wall_seconds", pa.float64()),   # the verdict, consensus runs included
        ("cpu_seconds", pa.float64()),    # CPU of every suite run (`Verdict.resources`)
        ("max_rss_kb", pa.int64()),       # peak RSS over its suite runs
    ]
)
VERDICT_TIMING_COLUMNS = tuple(VERDICT_TIMINGS.names[1:])
register("verdict_timings", [
    *not_null("candidate_id", "wall_seconds"),
    unique("candidate_id"),
    between("wall_seconds", 0.0, None),
    between("cpu_seconds", 0.0, None),
    between("max_rss_kb", 0, None),
])

EVAL_TIMINGS = pa.schema(
    [
        ("checkpoint", pa.string()),
        ("run", pa.string()),
        ("trajectory_id", pa.string()),
        ("seconds", pa.float64()),        # episode wall seconds
        ("tool_seconds", pa.float64()),   # of which in tool calls
        ("gen_seconds", pa.float64()),    # generate calls the episode took part in
    ]
)
EVAL_TIMING_COLUMNS = tuple(EVAL_TIMINGS.names[3:])
register("eval_timings", [
    *not_null("checkpoint", "run", "trajectory_id", "seconds"),
    unique_together("checkpoint", "run", "trajectory_id"),
    between("seconds", 0.0, None),
])

# ---- SFT demonstrations (sft): kept rollouts and the log of every dropped one (SPEC §6) ------
# Owned by rlvr/train/demos.py. A demonstration is checked as a trajectory, not only by its
# verdict; the first rule a rollout breaks is its drop reason (in this order).
SFT_DROP_REASONS = (
    "infra_error",     # the rollout or its verification hit an infrastructure error
    "not_verified",    # reward_outcome is not 1.0 (a failure, or never verified)
    "not_submitted",   # the episode did not end by `submit`
    "truncated",       # collector truncation (max_turns / max_tokens / observation)
    "invalid_action",  # some tool call did not parse / validate
    "too_long",        # longer than sft.max_seq_len (never truncated to fit)
    "duplicate",       # same token-id sequence as a kept demonstration
    "over_cap",        # beyond sft.demos.max_per_task for its task
)
SFT_PARTS = ("train", "val")
SFT_DROPS = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("task_id", pa.string()),
        ("family", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("token_hash", pa.string()),
    ]
)
register("sft_drops", [
    *not_null("trajectory_id", "task_id", "reason", "detail"),
    unique("trajectory_id"),
    in_set("reason", SFT_DROP_REASONS),
])
SFT_DATA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("task_id", pa.string()),
        ("family", pa.string()),
        ("part", pa.string()),             # train | val (split by task, seeded)
        ("token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),  # 1 on policy-sampled tokens only (SPEC §3)
        ("n_tokens", pa.int32()),
        ("n_trainable_tokens", pa.int32()),
        ("token_hash", pa.string()),       # sha256 of the token ids (the dedup key)
        ("engine", pa.string()),
        ("policy_version", pa.string()),
    ]
)
register("sft_data", [
    *not_null("trajectory_id", "task_id", "part", "token_hash", "n_tokens"),
    unique("trajectory_id"),
    unique("token_hash"),
    in_set("part", SFT_PARTS),
    between("n_trainable_tokens", 1, None),
])
