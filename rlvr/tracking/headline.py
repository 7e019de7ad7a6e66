"""The few numbers per stage a user reads first: what `metrics/<stage>.json` holds when the
stage also writes its details (`--details`, the DAG's `reports/stages/<stage>.json`).

Why: DVC shows every key of every metrics file as a column (`dvc exp show` had 919 of them,
`dvc metrics show` a table 19,000 characters wide), so the metrics files DVC reads hold one
to four headline numbers per stage and the rest lives beside them as a git-tracked DVC out
(and in MLflow, which logs every metric). Headline names are unique across stages and hold
neither '.' nor '/': DVC prefixes a column with its file's path when two files share a key,
and `dvc exp show --drop '.*[./]'` (README) drops every params and deps column by those two
characters, leaving the headlines, which fit a 200-column terminal. A headline whose source is absent (a stage that did not compute it under the
params given) is left out rather than invented.
"""
from __future__ import annotations

from typing import Any, Mapping

DETAILS_DIR = "reports/stages"  # the DAG's details files: <stage>.json, git-tracked

# stage -> ((headline name, dotted path in the stage's full metrics), ...)
HEADLINES: dict[str, tuple[tuple[str, str], ...]] = {
    "curate": (("curated", "accepted"),),
    "selfcheck": (("ref_pass", "by_origin.reference.success_rate"),),
    "init_policy": (("pretrain_loss", "pretrain.final_loss"),),
    "corpus": (),  # fetching pinned sources: nothing to compare between runs
    "synthesize": (("tasks", "accepted"),),
    "rollout": (("rollouts", "rollouts"),),
    "verify": (("verified", "success_rate"),),
    "sft": (("val_loss", "val_loss"),),
    "grpo": (("reward", "final.train/reward"),),
    "evaluate": (("init_p1", "init.heldout_function.pass_at_1"),
                 ("sft_p1", "sft.heldout_function.pass_at_1"),
                 ("grpo_p1", "grpo.heldout_function.pass_at_1"),
                 ("grpo_vs_sft", "grpo_vs_sft.heldout_function.difference_estimate")),
    "gate": (("decision", "decision"),),
}


def lookup(metrics: Mapping[str, Any], dotted: str) -> Any:
    """The value at `dotted` (keys may hold a '/', never a '.'), or None where absent."""
    node: Any = metrics
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def headline(stage: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """`metrics` reduced to `stage`'s headline numbers. A stage without an entry keeps
    none: refusing would fail a run at its very end for want of a display choice."""
    out = {}
    for name, dotted in HEADLINES.get(stage, ()):
        value = lookup(metrics, dotted)
        if value is not None:
            out[name] = value
    return out


__all__ = ["DETAILS_DIR", "HEADLINES", "headline", "lookup"]
