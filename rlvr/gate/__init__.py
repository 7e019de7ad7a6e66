"""The release gate (SPEC §8): a candidate checkpoint reaches the rollout pool or deployment
only if it is not worse than the champion where it matters, with the evidence to say so.

* `params`      — `GateParams`, the `gate` section of params.yaml (every threshold declared
  before the run);
* `inputs`      — what the gate reads, checked: one checkpoint's eval rows, pairing (same
  tasks, same sample seeds), the evaluated checkpoint's content hash, training metrics;
* `rules`       — the five rules and the decision as pure functions (promote / block /
  inconclusive);
* `reliability` — pass^k, turns and tool calls, tokens and seconds per solved task, infra
  errors; the "what improved / what got worse" table;
* `decision`    — `run_gate(...) -> GateResult`, whose `as_json()` is gate.json;
* `report`      — the Markdown report and its PNG plots;
* `apply`       — load, decide, register (`rlvr.tracking.registry`), write: the order that
  leaves nothing written and no alias moved on bad input.
"""
