"""Threads of the code under test and the enclave's trusted steps (runner.py, "Threads").

A thread can run between any two bytecodes of the main thread, so the hook treats its own
reads per thread (another thread is never waved through while one is inside), and every
trusted step that reads bindings first waits for threads the code under test left running;
one still running fails the run. Threads that end (joined or not) cost an honest patch
nothing. The race attacks themselves are in adversarial/threads.py (test_adversarial.py).
"""
from __future__ import annotations

import pytest

from adversarial.tiny_task import ALL_HIDDEN, FIXED_CORE, HIDDEN_LEAN, make_task, patch_to, with_core
from rlvr.enclave import Enclave
from rlvr.sandbox import Limits

LIMITS = Limits(wall_seconds=60.0, cpu_seconds=4, memory_bytes=768 << 20, max_processes=32,
                max_file_bytes=8 << 20, output_bytes=16 << 10)
TASKS = {"pytest": make_task(), "lean": make_task(hidden_tests=HIDDEN_LEAN)}

# The reference fix, plus a thread per call that does some work and ends on its own.
THREADS_THAT_END = FIXED_CORE.replace('''def clamp(x, lo, hi):
    """x limited to the closed interval [lo, hi]."""
''', '''def clamp(x, lo, hi):
    """x limited to the closed interval [lo, hi]."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    done = []
    threading.Thread(target=lambda: done.append(sum(range(1000)))).start()  # never joined
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(abs, [-1, 2])) == [1, 2]
''')

# The reference fix, plus a thread that outlives every test (it sleeps, so no CPU limit).
THREAD_LEFT_RUNNING = FIXED_CORE + '''

def _linger():
    import time
    for _ in range(600):
        time.sleep(0.05)


import threading
threading.Thread(target=_linger, daemon=True).start()
'''


@pytest.fixture(scope="module")
def enclave(sandbox_backend):
    with Enclave(backend=sandbox_backend, limits=LIMITS, workers=1, consensus_runs=1) as enc:
        yield enc


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_threads_that_end_cost_an_honest_patch_nothing(enclave, runner):
    run = enclave.run_suite(TASKS[runner], patch_to(with_core(THREADS_THAT_END)), seed=2)
    assert run.outcomes == {t: "passed" for t in ALL_HIDDEN}, run.outcomes
    assert run.safety_flags == []


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_a_thread_left_running_fails_the_run(enclave, runner):
    verdict = enclave.verify(TASKS[runner], patch_to(with_core(THREAD_LEFT_RUNNING)), seed=2)
    assert verdict.success is False
    assert "tamper_thread_alive" in verdict.safety_flags, verdict.safety_flags
