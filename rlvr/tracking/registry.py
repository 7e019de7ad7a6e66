"""The MLflow model registry as the gate's ledger (SPEC §8, §9).

One registered model holds a version per checkpoint that ever reached the gate, tagged with
the content hash of the exact checkpoint directory that was evaluated (`content_hash`, the
`weights_fingerprint`), its policy version(s) and step(s), and the gate's decision. The alias
`champion` points at the current champion and moves only on promotion
(`apply_decision`) or on `rollback`; every move is appended to the registered model's tag
`champion_history` (a JSON list of {version, event, reason}), which is what `rollback` walks
back. A rejected version carries `discard=true` and its `policy_step`/`policy_version`, so
the rollouts it produced can be dropped from the pool by policy version.

A checkpoint already registered (same content hash) is reused, not registered twice: a gate
rerun on the same inputs leaves the registry as it was. A candidate with the champion's own
content hash (training that made no update) changes nothing: no tag, no discard, no move.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Sequence

from rlvr.errors import RlvrError
from rlvr.tracking.store import tracking_uri as default_uri

HISTORY_TAG = "champion_history"


class RegistryError(RlvrError):
    """The registry does not hold what an operation needs (no champion to roll back to, a
    champion that is not the checkpoint the gate compared against)."""


def client(tracking_uri: str | None = None):
    """An MlflowClient on `tracking_uri` (else MLFLOW_TRACKING_URI, else the repo's sqlite
    store); the registry lives in the same store."""
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from mlflow import MlflowClient

    uri = tracking_uri or default_uri()
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


@dataclass(frozen=True)
class Checkpoint:
    """What gets registered: a checkpoint's content hash, where it lives, its versions."""

    name: str                          # checkpoint name (evaluate.checkpoints)
    content_hash: str
    source: str                        # its directory (or the evaluation, without one)
    policy_versions: tuple[str, ...] = ()
    policy_steps: tuple[int, ...] = ()


def _ensure_model(c, model: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        c.get_registered_model(model)
    except MlflowException:
        c.create_registered_model(model, description="rlvr policies that reached the gate; "
                                  "alias `champion` = the current champion")


def history(c, model: str) -> list[dict[str, Any]]:
    """The alias moves so far, oldest first."""
    from mlflow.exceptions import MlflowException

    try:
        tags = c.get_registered_model(model).tags
    except MlflowException:
        return []
    return json.loads(tags.get(HISTORY_TAG, "[]"))


def stack(moves: Sequence[dict[str, Any]]) -> list[str]:
    """The champions in force, oldest first, replaying the history: a baseline or a
    promotion pushes its version, a rollback pops the current one."""
    out: list[str] = []
    for m in moves:
        if m["event"] == "rollback":
            out.pop()
        else:
            out.append(m["version"])
    return out


def _push(c, model: str, entry: dict[str, Any]) -> None:
    c.set_registered_model_tag(model, HISTORY_TAG, json.dumps(history(c, model) + [entry]))


def find_version(c, model: str, content_hash: str):
    """The version registered with `content_hash`, or None."""
    from mlflow.exceptions import MlflowException

    try:
        found = c.search_model_versions(f"name='{model}' and tag.content_hash='{content_hash}'")
    except MlflowException:
        return None
    return min(found, key=lambda v: int(v.version)) if found else None


def register(c, model: str, ckpt: Checkpoint, tags: dict[str, str] | None = None):
    """The version of `ckpt` (registered now unless its content hash already is)."""
    _ensure_model(c, model)
    v = find_version(c, model, ckpt.content_hash)
    if v is None:
        v = c.create_model_version(model, source=ckpt.source, tags={
            "content_hash": ckpt.content_hash, "checkpoint": ckpt.name,
            "policy_version": ",".join(ckpt.policy_versions),
            "policy_step": ",".join(str(s) for s in ckpt.policy_steps)})
    for k, val in (tags or {}).items():
        c.set_model_version_tag(model, v.version, k, val)
    return v


def champion(c, model: str, alias: str = "champion"):
    """The version `alias` points at, or None."""
    from mlflow.exceptions import MlflowException

    try:
        aliases = c.get_registered_model(model).aliases
    except MlflowException:
        return None
    if alias not in aliases:
        return None
    return c.get_model_version_by_alias(model, alias)


def move_alias(c, model: str, version: str, *, event: str, reason: str,
               alias: str = "champion") -> None:
    c.set_registered_model_alias(model, alias, str(version))
    _push(c, model, {"version": str(version), "event": event, "reason": reason})


def check_champion(c, model: str, champion_hash: str, candidate_hash: str,
                   alias: str = "champion") -> str:
    """Before anything moves: how the registry's champion relates to the gate's inputs.

    `none` (no champion yet: the evaluated champion becomes the baseline), `match` (the
    alias is the evaluated champion), `applied` (the alias already is the candidate and the
    evaluated champion is the one it replaced: a rerun of an applied promotion). Anything
    else is a RegistryError: the gate compared against a checkpoint that is not the champion."""
    cur = champion(c, model, alias)
    if cur is None:
        return "none"
    h = cur.tags.get("content_hash")
    if h == champion_hash:
        return "match"
    held = stack(history(c, model))
    if h == candidate_hash and len(held) >= 2:
        prev = c.get_model_version(model, held[-2]).tags.get("content_hash")
        if prev == champion_hash:
            return "applied"
    raise RegistryError(f"registry {model!r}: alias {alias!r} is version {cur.version} "
                        f"({h}), but the gate compared against {champion_hash}; evaluate "
                        f"against the current champion (or `rlvr gate rollback`)")


def apply_decision(c, model: str, decision: str, candidate: Checkpoint, champ: Checkpoint, *,
                   alias: str = "champion", reason: str = "") -> dict[str, Any]:
    """Register both sides, record the decision on the candidate's version, move `alias` to
    it only on `promote`, mark it for discard on `block`. Returns what happened (for
    gate.json). Call `check_champion` first: this assumes it passed."""
    state = check_champion(c, model, champ.content_hash, candidate.content_hash, alias)
    base = register(c, model, champ)
    if state == "none":
        move_alias(c, model, base.version, event="baseline",
                   reason=f"first gate run: {champ.name} is the baseline champion", alias=alias)
    unchanged = candidate.content_hash == champ.content_hash
    tags = {"gate.decision": decision, "gate.champion_version": str(base.version)}
    if decision == "block" and not unchanged:
        tags.update({"discard": "true",
                     "discard.policy_step": ",".join(str(s) for s in candidate.policy_steps),
                     "discard.policy_version": ",".join(candidate.policy_versions)})
    # A candidate byte-identical to the champion (a training stage that made no update) is
    # the champion's own version: its decision must not tag it, nor discard its rollouts.
    cand = base if unchanged else register(c, model, candidate, tags)
    moved = False
    if decision == "promote" and state != "applied" and not unchanged:
        move_alias(c, model, cand.version, event="promote", reason=reason or
                   f"gate promoted {candidate.name} over {champ.name}", alias=alias)
        moved = True
    now = champion(c, model, alias)
    return {"model": model, "alias": alias, "candidate_version": str(cand.version),
            "champion_version": str(base.version), "alias_moved": moved,
            "champion_now": str(now.version) if now else None,
            "already_applied": state == "applied",
            "discard": decision == "block" and not unchanged,
            "candidate_is_champion": unchanged}


def rollback(c, model: str, *, alias: str = "champion", reason: str = "") -> dict[str, str]:
    """Move `alias` back to the champion before the current one (`stack` of the history:
    rolling back twice goes two champions back); the rolled-back version is tagged.
    RegistryError when there is none."""
    cur = champion(c, model, alias)
    if cur is None:
        raise RegistryError(f"registry {model!r}: no {alias!r} alias to roll back")
    held = stack(history(c, model))
    if len(held) < 2 or held[-1] != str(cur.version):
        raise RegistryError(f"registry {model!r}: version {cur.version} has no previous "
                            f"{alias} to roll back to")
    target = held[-2]
    c.set_model_version_tag(model, cur.version, "rolled_back", "true")
    move_alias(c, model, target, event="rollback",
               reason=reason or f"rollback from version {cur.version}", alias=alias)
    return {"model": model, "alias": alias, "from": str(cur.version), "to": str(target)}


def discarded(c, model: str) -> list[dict[str, Any]]:
    """Every version marked for discard: its checkpoint, policy versions and steps (what a
    rollout pool drops)."""
    out = []
    for v in c.search_model_versions(f"name='{model}'"):
        if v.tags.get("discard") == "true":
            out.append({"version": str(v.version), "checkpoint": v.tags.get("checkpoint"),
                        "policy_version": v.tags.get("discard.policy_version", ""),
                        "policy_step": v.tags.get("discard.policy_step", "")})
    return sorted(out, key=lambda d: int(d["version"]))


def aliases_of(c, model: str) -> dict[str, str]:
    return {k: str(v) for k, v in c.get_registered_model(model).aliases.items()}


def versions(c, model: str) -> Sequence[Any]:
    return sorted(c.search_model_versions(f"name='{model}'"), key=lambda v: int(v.version))
