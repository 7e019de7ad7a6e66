"""Suite-run sharing across the synthetic tasks of one seed family.

Curation's `OutcomeCache` keys a run by the whole target state. Every synthetic task of a
family differs from its siblings only in the mutated file(s) and its public test files, so
keyed that way nothing is shared: each task would pay its own N reference runs, its own
pristine run, its own stub and sibling-mutant runs. `FamilyOutcomeCache` keys by what the
hidden suite can observe instead:

* the *source* state — the state minus the task's public test files (the hidden suite runs
  from its own root and never imports the workspace's `tests/`), always run against the
  family's seed state as base task (so the enclave's fork-server receives the family's files
  once and then only small patches);
* the full suite — a run restricted to `tests` is answered from the full run of the same
  state and seed, filtered to those tests (the enclave's runs with a selection are also
  slower than full runs).

So the fixed state of every task of a family is the seed state (N reference runs per
family, not per task), a task's pristine state is the mutant run synthesis already made,
and the stub / sibling mutants of a function are run once for all tasks of that function.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Sequence

from rlvr.authoring.curation import OutcomeCache
from rlvr.tasks.model import Task, files_hash


class FamilyOutcomeCache(OutcomeCache):
    def __init__(self) -> None:
        super().__init__()
        self._bases: dict[str, tuple[Task, str]] = {}
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def register(self, base: Task) -> None:
        """Make `base` (a family's seed state + full suite) the base of its family's runs."""
        self._bases[base.family] = (base, files_hash(base.hidden_tests))

    def run(self, enclave, task: Task, state: dict[str, str], *, seed: int,
            shuffle: bool = True, tests: Sequence[str] | None = None):
        entry = self._bases.get(task.family)
        if entry is None or files_hash(task.hidden_tests) != entry[1]:
            return super().run(enclave, task, state, seed=seed, shuffle=shuffle, tests=tests)
        base = entry[0]
        public = set(task.public_tests)
        source = {p: c for p, c in state.items() if p not in public}
        # Two workers asking for the same state at once (sibling tasks of one function):
        # the second waits for the first's run instead of repeating it.
        key = (task.family, entry[1], files_hash(source), seed, shuffle)
        with self._locks_guard:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            full = super().run(enclave, base, source, seed=seed, shuffle=shuffle, tests=None)
        if tests is None:
            return full
        wanted = set(tests)
        return dataclasses.replace(
            full, outcomes={t: o for t, o in full.outcomes.items() if t in wanted})
