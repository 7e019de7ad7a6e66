"""The trusted author's side: how tasks are made and proven (SPEC §1–§2).

Curation (`curation.py`, `diagnostics.py`, `wrong.py`, `flaky.py`) proves that a task tells
right from wrong by running its reference fix, its unfixed state and wrong solutions through
the enclave, and `check.py` shows an author why; synthesis (`synth/`) injects bugs into seed
and real-library code and curates what it made; `authored.py`, `swebench.py` and `corpus.py`
read tasks and code from their sources.
It sits above both the agent (curation runs the agent's own `run_tests` on the buggy state)
and the enclave (it grades), and below training: nothing the policy runs imports it.
"""
