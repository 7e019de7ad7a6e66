"""The verification enclave end to end, on every sandbox place (`sandbox_place`: bwrap,
docker, docker over TCP+TLS on a second daemon).

A tiny task (tests/adversarial/tiny_task.py: a 2-module package, public tests, a hidden
suite with a hidden conftest fixture and parametrized tests) is verified with the reference
patch, the empty patch, wrong patches, an unappliable patch and a hanging one.
"""
from __future__ import annotations

import json
import os

import pytest

from conftest import remote_docker_options
from adversarial.tiny_task import ALL_HIDDEN, CORE, FAIL_TO_PASS, FIXED_CORE, HIDDEN, make_task, patch_to, with_core
from rlvr.artifacts.schemas import VERDICT_REASONS
from rlvr.enclave import VERIFIER_VERSION, Enclave, run_seed, task_key
from rlvr.enclave.core import SuiteRun
from rlvr.sandbox import Limits
from rlvr.sandbox.base import UID_HIGH, UID_LOW

# A generous wall limit (a loaded CI machine must not turn slow runs into timeouts) and a
# tight CPU limit: a busy loop is stopped by RLIMIT_CPU, which does not depend on load.
LIMITS = Limits(wall_seconds=60.0, cpu_seconds=2, memory_bytes=768 << 20, max_processes=32,
                max_file_bytes=8 << 20, output_bytes=16 << 10)
TASK = make_task()
WRONG_CORE = CORE.replace("    if x > hi:\n        return lo", "    if x > hi:\n        return x")
# Passes the hidden suite about 60% of the time (the runner seeds `random` per run).
COIN_CORE = FIXED_CORE.replace('"""x limited to the closed interval [lo, hi]."""',
                               '"""x limited to the closed interval [lo, hi]."""\n    import random\n'
                               '    if x > hi and random.random() < 0.12:\n        return lo')


@pytest.fixture(scope="module")
def enclave(sandbox_place):
    """An enclave per place: bwrap, docker, and docker on a second daemon reachable only over
    TCP with mutual TLS (its workers' code copied into the daemon's volumes, no bind mount)."""
    backend, options = (("docker", {"docker_hosts": [remote_docker_options()["docker_host"]],
                                    "tls_dir": remote_docker_options()["tls_dir"]})
                        if sandbox_place == "docker-tls" else (sandbox_place, {}))
    with Enclave(backend=backend, limits=LIMITS, workers=2, consensus_runs=3,
                 sandbox_options=options) as enc:
        yield enc


def test_reference_passes_with_full_consensus(enclave):
    verdict = enclave.verify(TASK, TASK.reference_patch, seed=1)
    assert (verdict.success, verdict.reason, verdict.runs) == (True, "none", 3)
    assert verdict.verifier_version == VERIFIER_VERSION
    assert verdict.safety_flags == []
    assert verdict.resources["cpu_seconds"] > 0 and verdict.resources["max_rss_kb"] > 0


def _uid_checking_core(inside: bool) -> str:
    """The fixed clamp, broken unless the code runs under (`inside`) / outside a uid of the
    supervisor's private range."""
    cond = f"{UID_LOW} <= os.getuid() < {UID_HIGH}"
    return FIXED_CORE.replace(
        '"""x limited to the closed interval [lo, hi]."""',
        '"""x limited to the closed interval [lo, hi]."""\n    import os\n'
        f'    if {"not " if inside else ""}({cond}):\n        return None')


@pytest.mark.skipif(os.geteuid() != 0, reason="verdict children get their own uids only when "
                                              "rlvr runs as root (on both backends)")
def test_verdict_children_run_under_their_own_unprivileged_uid(enclave):
    """On docker as on bwrap the fork-server drops each verdict child to a uid of its private
    range (never the server's uid 0), so the kernel, not only the audit hook, keeps one run's
    code from signalling the server or another run: every consensus run passes with the check,
    and the inverted check fails."""
    inside = enclave.verify(TASK, patch_to(with_core(_uid_checking_core(True))), seed=5)
    assert (inside.success, inside.reason, inside.runs) == (True, "none", 3), inside.detail
    outside = enclave.verify(TASK, patch_to(with_core(_uid_checking_core(False))), seed=5)
    assert (outside.success, outside.reason) == (False, "tests_failed")


def test_empty_patch_fails_after_one_run(enclave):
    verdict = enclave.verify(TASK, "", seed=1)
    assert (verdict.success, verdict.reason, verdict.runs) == (False, "tests_failed", 1)


def test_wrong_patch_fails(enclave):
    verdict = enclave.verify(TASK, patch_to(with_core(WRONG_CORE)), seed=2)
    assert (verdict.success, verdict.reason, verdict.runs) == (False, "tests_failed", 1)


def test_patch_that_does_not_apply_is_apply_failed(enclave):
    stale = TASK.reference_patch.replace("    if x > hi:", "    if x >= hi:")  # context not in the file
    verdict = enclave.verify(TASK, stale, seed=1)
    assert (verdict.success, verdict.reason, verdict.runs) == (False, "apply_failed", 1)


def test_busy_loop_is_a_timeout(enclave):
    hang = with_core(FIXED_CORE.replace("def mean(xs):\n", "def mean(xs):\n    while True:\n        pass\n"))
    verdict = enclave.verify(TASK, patch_to(hang), seed=1)
    assert (verdict.success, verdict.reason, verdict.runs) == (False, "timeout", 1)


@pytest.mark.parametrize("outcomes,flags,reason", [
    ({"t::a": "passed"}, [], "timeout"),                         # nothing graded failed yet
    ({}, ["server_unresponsive"], "timeout"),
    ({"t::a": "passed", "t::b": "failed"}, [], "tests_failed"),  # decided before the budget
    ({"t::a": "error"}, ["resource_limit_hit"], "resource_limit"),
])
def test_a_graded_failure_before_the_budget_decides_as_in_a_finished_run(outcomes, flags, reason):
    """The budget edge: the same wrong patch, cut by the budget on a loaded machine or
    finishing on an idle one, gets one reason (issue 39 item 3)."""
    graded = ["t::a", "t::b", "t::c"]
    cut = SuiteRun("timeout", dict(outcomes), 30.0, {}, list(flags))
    finished = SuiteRun("ok", {**{t: "passed" for t in graded}, **outcomes}, 29.0, {}, list(flags))
    assert Enclave.judge(cut, graded)[0] == reason
    if reason != "timeout":
        assert Enclave.judge(finished, graded)[0] == reason


def test_sleeping_patch_hits_the_wall_clock_limit(sandbox_backend):
    sleepy = with_core(FIXED_CORE.replace("def mean(xs):\n", "def mean(xs):\n    import time\n    time.sleep(600)\n"))
    with Enclave(backend=sandbox_backend, limits=LIMITS.replace(wall_seconds=2.0)) as enc:
        verdict = enc.verify(TASK, patch_to(sleepy), seed=1)
        assert (verdict.success, verdict.reason, verdict.runs) == (False, "timeout", 1)
        assert enc.verify(TASK, TASK.reference_patch, seed=1).success  # the server survived


def test_rejected_patch_runs_nothing(enclave):
    verdict = enclave.verify(TASK, patch_to({**TASK.repo_files, "conftest.py": "x = 1\n"}), seed=1)
    assert (verdict.success, verdict.reason, verdict.runs) == (False, "patch_rejected", 0)
    assert "conftest.py" in verdict.detail


def test_consensus_reruns_only_after_a_first_pass(enclave):
    """A patch that passes by luck: only a first pass buys more runs, any failed rerun
    fails the verdict, and the run count says where it stopped."""
    coin = patch_to(with_core(COIN_CORE))
    verdicts = [enclave.verify(TASK, coin, seed=s) for s in range(12)]
    runs = {v.runs for v in verdicts}
    assert runs <= {1, 2, 3}
    assert any(v.runs == 1 and not v.success for v in verdicts)  # lost the first toss
    assert any(v.runs >= 2 for v in verdicts)  # won it, then rerun
    for v in verdicts:
        assert v.success == (v.runs == 3 and v.reason == "none")
        assert v.reason in VERDICT_REASONS


def test_single_run_enclave_never_reruns(sandbox_backend):
    with Enclave(backend=sandbox_backend, limits=LIMITS, consensus_runs=1) as enc:
        assert enc.verify(TASK, TASK.reference_patch, seed=4).runs == 1


def test_quarantined_tests_never_count(enclave):
    # Fixes everything except TestUpper::test_upper_bound.
    partial = with_core(FIXED_CORE.replace("    if x > hi:\n        return hi",
                                           "    if x > hi:\n        return lo if (x, lo, hi) == (7, 1, 3) else hi"))
    patch = patch_to(partial)
    assert not enclave.verify(TASK, patch, seed=5).success
    quarantined = TASK.with_(quarantined=(("test_core.py::TestUpper::test_upper_bound", "flaky on reference"),))
    verdict = enclave.verify(quarantined, patch, seed=5)
    assert (verdict.success, verdict.runs) == (True, 3)


def test_missing_graded_test_counts_as_failed(enclave):
    ghost = TASK.with_(pass_to_pass=TASK.pass_to_pass + ("test_core.py::test_does_not_exist",))
    verdict = enclave.verify(ghost, ghost.reference_patch, seed=1)
    assert (verdict.success, verdict.reason) == (False, "tests_failed")


def test_public_verdict_leaks_no_test_names_or_assertions(enclave):
    for patch in (TASK.reference_patch, "", patch_to(with_core(WRONG_CORE))):
        verdict = enclave.verify(TASK, patch, seed=1)
        public = verdict.public()
        assert set(public) == {"task_id", "success", "reason", "runs", "verifier_version", "wall_seconds",
                               "resources", "safety_flags"}
        text = json.dumps({k: v for k, v in public.items() if k != "task_id"})
        for secret in ("test_", "clamp", "assert", "want", "mean", "spread", "TestUpper", "big"):
            assert secret not in text, (secret, text)


def test_run_suite_discovers_every_hidden_test_with_outcomes(enclave):
    fixed = enclave.run_suite(TASK, TASK.reference_patch, seed=3)
    assert fixed.status == "ok"
    assert fixed.outcomes == {t: "passed" for t in ALL_HIDDEN}
    pristine = enclave.run_suite(TASK, "", seed=3)
    assert {t for t, o in pristine.outcomes.items() if o != "passed"} == set(FAIL_TO_PASS)
    assert set(pristine.outcomes.values()) <= {"passed", "failed", "error", "skipped"}


def test_run_suite_runs_only_the_selected_tests(enclave):
    chosen = ["test_util.py::test_spread", "test_core.py::test_mean"]
    run = enclave.run_suite(TASK, "", seed=3, tests=chosen)
    assert run.outcomes == {t: "passed" for t in chosen}


def test_same_seed_same_order_and_outcomes_other_seed_other_order(enclave):
    a = enclave.run_suite(TASK, "", seed=11)
    b = enclave.run_suite(TASK, "", seed=11)
    assert (a.order, a.outcomes) == (b.order, b.outcomes)
    orders = {tuple(enclave.run_suite(TASK, "", seed=s).order) for s in (12, 13, 14)}
    assert len(orders | {tuple(a.order)}) > 1
    unshuffled = enclave.run_suite(TASK, "", seed=12, shuffle=False)
    assert unshuffled.order == sorted(unshuffled.order)


def test_seeded_random_is_reproducible(enclave):
    coin = patch_to(with_core(COIN_CORE))
    first = [enclave.run_suite(TASK, coin, seed=s).outcomes for s in range(4)]
    again = [enclave.run_suite(TASK, coin, seed=s).outcomes for s in range(4)]
    assert first == again


def test_hidden_fixture_errors_and_fixture_scoping(enclave):
    """A hidden test whose fixture is missing errors; the hidden conftest still serves `big`."""
    hidden = {**HIDDEN, "test_more.py": "def test_needs_unknown(nope):\n    pass\n\n"
                                         "def test_uses_big(big):\n    assert big == 10\n"}
    run = enclave.run_suite(make_task(hidden_tests=hidden), "", seed=1)
    assert run.outcomes["test_more.py::test_needs_unknown"] == "error"
    assert run.outcomes["test_more.py::test_uses_big"] == "passed"


def test_doctest_namespace_is_served_but_no_doctest_is_collected(enclave):
    """Upstream conftests fill `doctest_namespace` from autouse fixtures: the fixture exists
    (the doctest plugin is loaded), yet no hidden file is collected as a doctest - not even
    a data file matching pytest's default `test*.txt` glob."""
    conftest = HIDDEN["conftest.py"] + (
        "\n\n@pytest.fixture(autouse=True)\ndef _ns(doctest_namespace):\n"
        "    doctest_namespace['answer'] = 42\n")
    hidden = {**HIDDEN, "conftest.py": conftest, "test_notes.txt": ">>> 1 / 0\n0\n",
              "docs/test_more.rst": ">>> raise SystemExit(3)\n"}
    run = enclave.run_suite(make_task(task_id="tiny-doctest", hidden_tests=hidden), TASK.reference_patch, seed=1)
    assert run.status == "ok"
    assert run.outcomes == {t: "passed" for t in ALL_HIDDEN}


def test_hidden_module_that_fails_to_import_only_loses_its_own_tests(enclave):
    hidden = {**HIDDEN, "test_broken.py": "import not_a_module\n\ndef test_x():\n    pass\n"}
    run = enclave.run_suite(make_task(hidden_tests=hidden), TASK.reference_patch, seed=1)
    assert run.status == "ok"
    assert run.outcomes == {t: "passed" for t in ALL_HIDDEN}


def test_output_fixtures_work_and_output_is_harmless(enclave):
    """A suite that names caplog/capsys keeps pytest's capture and logging plugins (runs of
    other suites drop them); code that prints and logs passes either way."""
    chatty = with_core(FIXED_CORE.replace(
        "def mean(xs):\n",
        "def mean(xs):\n    import logging\n    print('mean of', xs)\n"
        "    logging.getLogger('mathpkg').warning('mean of %s', xs)\n"))
    io_tests = ("import logging\n\nfrom mathpkg import mean\n\n\n"
                "def test_caplog(caplog):\n    with caplog.at_level(logging.WARNING):\n"
                "        assert mean([2, 4]) == 3\n    assert 'mean of' in caplog.text\n\n\n"
                "def test_capsys(capsys):\n    assert mean([1, 3]) == 2\n"
                "    assert 'mean of' in capsys.readouterr().out\n")
    with_io = make_task(task_id="tiny-io", hidden_tests={**HIDDEN, "test_io.py": io_tests})
    run = enclave.run_suite(with_io, patch_to(chatty), seed=1)
    # logging's caller lookup (sys._getframe) gets frame views: nothing refused, nothing flagged
    assert run.status == "ok" and run.safety_flags == []
    assert run.outcomes["test_io.py::test_caplog"] == "passed"
    assert run.outcomes["test_io.py::test_capsys"] == "passed"
    plain = enclave.run_suite(TASK, patch_to(chatty), seed=1)
    assert plain.status == "ok" and not plain.tampered
    assert plain.outcomes == {t: "passed" for t in ALL_HIDDEN}


def test_patched_module_runs_its_new_code_not_the_precompiled_pristine_one(enclave):
    """The server ships hash-checked .pyc files of the pristine snapshot; a module the patch
    changed must be compiled from its patched source (first run by git, then from the
    consensus cache of the applied tree)."""
    for seed in (1, 2):
        assert enclave.run_suite(TASK, "", seed=seed).outcomes != {t: "passed" for t in ALL_HIDDEN}
        fixed = enclave.run_suite(TASK, TASK.reference_patch, seed=seed)
        assert fixed.outcomes == {t: "passed" for t in ALL_HIDDEN}


def test_verify_many_keeps_input_order(enclave):
    items = [(TASK, TASK.reference_patch), (TASK, ""), (TASK, patch_to(with_core(WRONG_CORE)), 9)]
    verdicts = enclave.verify_many(items, seed=5)
    assert [v.success for v in verdicts] == [True, False, False]
    assert verdicts[0].runs == 3


def test_enclave_recovers_after_its_server_dies(enclave):
    worker = enclave._acquire()
    enclave._idle.put(worker)
    worker.handle.close()  # the server is gone; the next verdict must start a new one
    verdicts = [enclave.verify(TASK, TASK.reference_patch, seed=s) for s in range(3)]
    assert all(v.success for v in verdicts)


def test_task_is_resent_when_the_server_does_not_have_it(enclave):
    """The host remembers which tasks a server holds; a server that lost one (restart,
    eviction) answers need_task and the host sends the snapshot again."""
    other = make_task(task_id="tiny-other", hidden_tests={**HIDDEN, "test_extra.py": "def test_extra():\n    pass\n"})
    for worker in enclave._all:
        worker.known.add(task_key(other))  # pretend every server already has it
    run = enclave.run_suite(other, "", seed=1)
    assert run.status == "ok" and run.outcomes["test_extra.py::test_extra"] == "passed"


def test_consensus_run_seeds_are_deterministic_and_spread():
    assert run_seed(7, 0) == 7  # the first run replays with the verdict seed itself
    assert run_seed(7, 1) == run_seed(7, 1)
    assert len({run_seed(7, i) for i in range(50)} | {run_seed(8, i) for i in range(1, 50)}) == 99
