"""Each distinguishability rule of SPEC §1, shown by a task that violates it."""
from __future__ import annotations

import pytest

from rlvr.authoring.authored import load_task_dir
from rlvr.authoring.curation import CurationParams, Rejection, curate, curate_one
from rlvr.tasks.splits import SplitParams
from taskkit import BUGGY_CORE, HIDDEN_TEST, write_task

PARAMS = CurationParams(reference_runs=3, max_mutants=4)


@pytest.fixture(scope="module")
def enclave():
    from rlvr.enclave import Enclave

    with Enclave(backend="bwrap", workers=1) as e:
        yield e


def _curate(path, enclave, params=PARAMS):
    return curate_one(load_task_dir(path), enclave, params)


def _rejected(result, reason: str) -> Rejection:
    assert isinstance(result, Rejection), f"expected rejection {reason}, got accepted task"
    assert result.reason == reason, result.detail
    return result


def test_good_task_is_accepted_with_computed_test_sets(tmp_path, enclave):
    task = _curate(write_task(tmp_path), enclave)
    assert not isinstance(task, Rejection), task.detail
    assert task.fail_to_pass == ("test_hidden.py::test_clamp_above",)
    assert set(task.pass_to_pass) == {"test_hidden.py::test_clamp_inside",
                                      "test_hidden.py::test_clamp_below",
                                      "test_hidden.py::test_double"}
    assert task.checks["mutants"] > 0 and task.checks["mutants_killed"] > 0
    assert task.split == "train"


def test_rule1_buggy_state_that_passes_is_rejected(tmp_path, enclave):
    # The hidden suite never exercises the bug: the buggy state passes it.
    blind = HIDDEN_TEST.replace("def test_clamp_above():\n    assert clamp(50, 0, 10) == 10\n",
                                "")
    assert "test_clamp_above" not in blind
    _rejected(_curate(write_task(tmp_path, hidden={"test_hidden.py": blind}), enclave),
              "pristine_passes")


def test_rule2_reference_that_fails_is_rejected(tmp_path, enclave):
    still_wrong = BUGGY_CORE.replace("    if x > high:\n        return low",
                                     "    if x > high:\n        return high + 1")
    _rejected(_curate(write_task(tmp_path, fixed=still_wrong), enclave), "reference_fails")


def test_rule3_constant_stub_accepted_by_weak_suite_is_rejected(tmp_path, enclave):
    weak = ("from mini.core import clamp, double\n\n"
            "def test_above_is_not_low():\n    assert clamp(50, 0, 10) != 0\n\n"
            "def test_double():\n    assert double(4) == 8\n")
    rej = _rejected(_curate(write_task(tmp_path, hidden={"test_hidden.py": weak}), enclave),
                    "wrong_solution_passes")
    assert rej.detail.startswith("stub:")


def test_rule3_suite_blind_to_other_mutants_is_rejected(tmp_path, enclave):
    # Only the bug's own branch is tested: mutants elsewhere in clamp survive.
    blind = ("from mini.core import clamp, double\n\n"
             "def test_above():\n    assert clamp(50, 0, 10) == 10\n\n"
             "def test_double():\n    assert double(4) == 8\n")
    rej = _rejected(_curate(write_task(tmp_path, hidden={"test_hidden.py": blind}), enclave,
                            CurationParams(reference_runs=2, max_mutants=8,
                                           min_mutant_kill_rate=0.9)),
                    "wrong_solution_passes")
    assert "other mutants" in rej.detail


def test_rule3_test_editing_patch_is_refused_by_the_verifier(tmp_path, enclave):
    from rlvr.tasks.patches import make_patch

    task = _curate(write_task(tmp_path), enclave)
    gutted = {**task.repo_files, "tests/test_public.py": "def test_x():\n    assert True\n"}
    verdict = enclave.verify(task, make_patch(task.repo_files, gutted), seed=0)
    assert (verdict.success, verdict.reason) == (False, "patch_rejected")


FLAKY = HIDDEN_TEST + (
    "\n\nimport random\n\n\ndef test_sometimes():\n    assert random.random() < 0.8\n")


def test_rule4_test_flaky_on_reference_is_quarantined(tmp_path, enclave):
    # 20 seeded, shuffled runs: a test failing ~20% of the time varies with prob 1-0.8^20.
    task = _curate(write_task(tmp_path, hidden={"test_hidden.py": FLAKY}), enclave,
                   CurationParams(reference_runs=20, max_mutants=2))
    assert not isinstance(task, Rejection), task.detail
    (test_id, reason), = task.quarantined
    assert test_id == "test_hidden.py::test_sometimes"
    assert reason.startswith("flaky_suite:") and "flaky on reference" in reason
    assert test_id not in task.graded_tests


def test_rule4_only_flaky_tests_separate_buggy_from_fixed(tmp_path, enclave):
    flaky_f2p = ("import random\nfrom mini.core import clamp, double\n\n"
                 "def test_above():\n"
                 "    assert clamp(50, 0, 10) == 10 and random.random() < 0.8\n\n"
                 "def test_double():\n    assert double(4) == 8\n")
    _rejected(_curate(write_task(tmp_path, hidden={"test_hidden.py": flaky_f2p}), enclave,
                      CurationParams(reference_runs=20, max_mutants=0)),
              "nondeterministic_reference")


def test_rule5_no_pass_to_pass_is_rejected(tmp_path, enclave):
    only_f2p = ("from mini.core import clamp\n\n"
                "def test_above():\n    assert clamp(50, 0, 10) == 10\n")
    _rejected(_curate(write_task(tmp_path, hidden={"test_hidden.py": only_f2p}), enclave),
              "no_pass_to_pass")


def test_rule6_instruction_that_leaks_the_fix_is_rejected(tmp_path, enclave):
    leaky = "clamp is wrong above the range; the second branch should say `return high`."
    rej = _rejected(_curate(write_task(tmp_path, instruction=leaky), enclave),
                    "instruction_leaks")
    assert "return high" in rej.detail


def test_duplicates_are_logged_not_dropped(tmp_path, enclave):
    a = load_task_dir(write_task(tmp_path, "a"))
    b = load_task_dir(write_task(tmp_path, "b"))
    result = curate([a, b], enclave, PARAMS)
    assert [t.task_id for t in result.accepted] == ["a"]
    (rej,) = result.rejections
    assert (rej.task_id, rej.reason) == ("b", "duplicate")
    assert "as a" in rej.detail


def test_split_is_assigned_by_family(tmp_path, enclave):
    params = CurationParams(reference_runs=2, max_mutants=0,
                            split=SplitParams(heldout_families=["mini"]))
    task = _curate(write_task(tmp_path), enclave, params)
    assert task.split == "heldout"



# ---- diagnostics in the rejection log (issue 12) -----------------------------------------
def test_reference_failure_names_the_failing_tests(tmp_path, enclave):
    still_wrong = BUGGY_CORE.replace("    if x > high:\n        return low",
                                     "    if x > high:\n        return high + 1")
    rej = _rejected(_curate(write_task(tmp_path, fixed=still_wrong), enclave), "reference_fails")
    assert rej.tests == ("test_hidden.py::test_clamp_above",)
    assert "test_hidden.py::test_clamp_above" in rej.detail
    row = rej.to_row()
    assert row["tests"] == ["test_hidden.py::test_clamp_above"] and row["flags"] == []


def test_hidden_module_that_fails_to_import_is_a_named_error(tmp_path, enclave):
    broken = "from mini.core import clamp, missing_name\n\ndef test_a():\n    assert clamp(1, 0, 2) == 1\n"
    task_dir = write_task(tmp_path, hidden={"test_hidden.py": HIDDEN_TEST,
                                            "test_broken.py": broken})
    rej = _rejected(_curate(task_dir, enclave), "hidden_import_error")
    assert rej.tests == ("test_broken.py",)
    assert "test_broken.py" in rej.detail
    assert "missing_name" in rej.error      # the import error a plain pytest run reports


def test_public_tests_the_agent_cannot_run_are_rejected(tmp_path, enclave):
    # The public test file defines no tests: the agent's run_tests ends "no tests collected".
    no_tests = "from mini.core import clamp\n\n\ndef helper():\n    return clamp(1, 0, 2)\n"
    rej = _rejected(_curate(write_task(tmp_path, public=no_tests), enclave),
                    "public_tests_unrunnable")
    assert "no tests collected" in rej.detail and "exit 5" in rej.detail
    assert rej.tests == ("tests/test_public.py",)


MANY_FLAKY = HIDDEN_TEST + "\n\nimport random\n" + "".join(
    f"\n\ndef test_flaky_{i}():\n    assert random.random() < 0.8\n" for i in range(12))


def test_phase2_catches_flaky_tests_the_first_runs_missed(tmp_path, enclave):
    # 12 tests failing 20% of the time (seeded per run and test id): the 5 phase-1 runs miss
    # some (each with probability 0.33); the 14 runs of both phases miss far fewer.
    task_dir = write_task(tmp_path, hidden={"test_hidden.py": MANY_FLAKY})
    old = _curate(task_dir, enclave, CurationParams(max_mutants=0, flaky_catch=0.0,
                                                    max_flaky_share=1.0))
    new = _curate(task_dir, enclave, CurationParams(max_mutants=0, max_flaky_share=1.0))
    assert not isinstance(new, Rejection), new.detail
    assert old.checks["reference_runs"] == 5 and new.checks["reference_runs"] == 11
    assert new.checks["verify_runs"] == enclave.consensus_runs == 3
    assert new.checks["flaky_catch_probability"] == 0.956   # 1 - 0.8^14 - 0.2^14
    # what the 5 runs saw (all the old rule had) is a strict subset of what 14 observations see
    seen_in_5 = {t for t, reason in old.quarantined if "/5 seeded" in reason}
    assert seen_in_5 and seen_in_5 < new.quarantined_ids
    assert all(t.startswith("test_hidden.py::test_flaky_") for t in new.quarantined_ids)
    assert "test_hidden.py::test_clamp_above" in new.fail_to_pass


def test_mostly_flaky_suite_is_rejected_as_flaky_suite_not_reference_fails(tmp_path, enclave):
    rej = _rejected(_curate(write_task(tmp_path, hidden={"test_hidden.py": MANY_FLAKY}),
                            enclave, CurationParams(max_mutants=0, max_flaky_share=0.25)),
                    "flaky_suite")
    assert rej.tests and all(t.startswith("test_hidden.py::test_flaky_") for t in rej.tests)
    assert rej.error.startswith("flaky_suite: flaky on reference, passed ")


def test_flaky_params_are_checked():
    from rlvr.errors import ConfigError

    assert CurationParams().fixed_state_runs(verify_runs=3) == 11     # + 3 consensus = 14
    assert CurationParams().fixed_state_runs(verify_runs=1) == 13
    assert CurationParams(flaky_catch=0.0).fixed_state_runs(verify_runs=3) == 5
    for bad in ({"flaky_rate": 0.0}, {"flaky_catch": 1.0}, {"reference_runs": 0},
                {"max_flaky_share": 1.5}):
        with pytest.raises(ConfigError, match="curate."):
            CurationParams(**bad)


# ---- the follow-up of a refused reference verdict, on a scripted enclave ------------------
class ScriptedEnclave:
    """run_suite / verify with scripted outcomes: the fixed state fails `flaky` exactly at the
    seeds in `fail_seeds`, the buggy state fails test_clamp_above, any other state fails
    everything; verify refuses the reference while `refusals` last (then replays decide)."""

    consensus_runs = 3

    def __init__(self, flaky: str, fail_seeds: set[int], refusals: int):
        self.flaky, self.fail_seeds, self.refusals = flaky, fail_seeds, refusals
        self.verifies = 0
        self.seeds: list[int] = []

    def run_suite(self, task, patch, *, seed, shuffle=True, tests=None):
        from rlvr.enclave.core import SuiteRun
        from rlvr.tasks.patches import apply_patch

        ids = tests if tests is not None else sorted(
            f"test_hidden.py::{n}" for n in ("test_clamp_above", "test_clamp_inside",
                                             "test_clamp_below", "test_double"))
        state = apply_patch(task.repo_files, patch, "scripted") if patch else task.repo_files
        fixed = apply_patch(task.repo_files, task.reference_patch, "scripted")
        self.seeds.append(seed)
        if state == fixed:
            out = {t: "failed" if t == self.flaky and seed in self.fail_seeds else "passed"
                   for t in ids}
        elif state == task.repo_files:
            out = {t: "failed" if t.endswith("test_clamp_above") else "passed" for t in ids}
        else:
            out = {t: "failed" for t in ids}
        return SuiteRun("ok", out, 0.0, {})

    def verify(self, task, patch, *, seed):
        from rlvr.enclave.core import Verdict
        from rlvr.tasks.patches import check_patch

        if not check_patch(task, patch).ok:
            return Verdict(task.task_id, False, "patch_rejected", 0, "scripted", 0.0, {}, [])
        self.verifies += 1
        if self.verifies <= self.refusals:
            return Verdict(task.task_id, False, "tests_failed", 2, "scripted", 0.0, {}, [])
        return Verdict(task.task_id, True, "none", self.consensus_runs, "scripted", 0.0, {}, [])


FOLLOW_UP = CurationParams(max_mutants=0, check_public_tests=False)
DOUBLE = "test_hidden.py::test_double"


def _verify_seed(params: CurationParams) -> int:
    return params.seed + 7919 * params.fixed_state_runs(ScriptedEnclave.consensus_runs)


def test_refused_reference_whose_replay_fails_a_test_quarantines_it(tmp_path):
    from rlvr.enclave.core import run_seed

    fails_in_verify = run_seed(_verify_seed(FOLLOW_UP), 1)
    enclave = ScriptedEnclave(DOUBLE, {fails_in_verify}, refusals=1)
    task = _curate(write_task(tmp_path), enclave, FOLLOW_UP)
    assert not isinstance(task, Rejection), task.detail
    assert dict(task.quarantined)[DOUBLE].startswith(
        "flaky_suite: flaky on reference, passed 12/13 ")   # 11 runs + 2 replayed verify runs
    assert DOUBLE not in task.graded_tests and enclave.verifies == 2


def test_refusal_that_replays_do_not_reproduce_gets_more_runs_until_one_fails(tmp_path):
    n_total = FOLLOW_UP.fixed_state_runs(ScriptedEnclave.consensus_runs)
    third_extra = FOLLOW_UP.seed + 7919 * (n_total + 3)
    enclave = ScriptedEnclave(DOUBLE, {third_extra}, refusals=1)
    task = _curate(write_task(tmp_path), enclave, FOLLOW_UP)
    assert not isinstance(task, Rejection), task.detail
    assert DOUBLE in task.quarantined_ids
    assert enclave.seeds.count(third_extra) == 1
    assert FOLLOW_UP.seed + 7919 * (n_total + 4) not in enclave.seeds   # stopped at the first


def test_refusal_nothing_reproduces_is_an_unnamed_flaky_suite(tmp_path):
    enclave = ScriptedEnclave(DOUBLE, set(), refusals=1)
    rej = _rejected(_curate(write_task(tmp_path), enclave, FOLLOW_UP), "flaky_suite")
    assert rej.tests == () and "none could be named" in rej.detail


def test_reference_refused_for_another_reason_is_reference_fails(tmp_path):
    class Timeouts(ScriptedEnclave):
        def verify(self, task, patch, *, seed):
            from rlvr.enclave.core import Verdict

            return Verdict(task.task_id, False, "timeout", 1, "scripted", 0.0, {},
                           ["server_unresponsive"], "no reply from the enclave server")

    rej = _rejected(_curate(write_task(tmp_path), Timeouts(DOUBLE, set(), 0), FOLLOW_UP),
                    "reference_fails")
    assert rej.flags == ("server_unresponsive",)
    assert rej.error == "no reply from the enclave server"
