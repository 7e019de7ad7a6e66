"""The human report of a gate run: Markdown with PNG plots beside it (SPEC §8 outputs).

`render_markdown(gate, cost=None, plots={})` turns gate.json (`GateResult.as_json()`, plus the
registry outcome) into the report text; `write_plots(...)` draws the pass@k curves per tier
(both sides, `rlvr.evaluate.report.write_plots`) and, when the candidate's training metrics
have them, its entropy / length / reward / parse-error / loss curves. `write_report` writes
both, each file atomically.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr.artifacts.io import replace_dir, temp_dir_beside, write_text
from rlvr.artifacts.plots import pyplot, save_png
from rlvr.evaluate.report import pass_at_k_table
from rlvr.evaluate.report import write_plots as write_pass_at_k
from rlvr.gate.inputs import TrainingMetrics
from rlvr.gate.params import TrainingKeys

MARK = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}


def _f(x: Any, digits: int = 3, signed: bool = False) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, (int, float)):
        return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
    return str(x)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def render_markdown(gate: Mapping[str, Any], *, cost: Mapping[str, Any] | None = None,
                    plots: Mapping[str, str] | None = None) -> str:
    """The report of one gate.json. `cost`: {candidate|champion: {tier: seconds}} from the
    timings sidecars (None: no seconds column; the stage keeps wall time out of its
    versioned report); `plots`: title -> path relative to the report."""
    cand, champ = gate["candidate"], gate["champion"]
    out = [f"# Release gate: **{gate['decision'].upper()}**\n\n",
           f"Candidate `{cand['name']}` (`{cand['content_hash']}`) against champion "
           f"`{champ['name']}` (`{champ['content_hash']}`), paired on identical tasks and "
           f"sample seeds. Evaluations: `{cand['evaluation']}`"
           + (f", `{champ['evaluation']}`" if champ["evaluation"] != cand["evaluation"] else "")
           + ".\n\n"]
    if gate.get("candidate_is_champion"):
        out.append("The candidate is the champion's own checkpoint (same content hash: "
                   "training made no update); nothing is discarded or moved.\n\n")
    if gate["blocking"]:
        out.append("Blocked by: " + ", ".join(f"`{b}`" for b in gate["blocking"]) + ".\n\n")
    if gate["inconclusive"]:
        out.append("Could not decide: " + ", ".join(f"`{b}`" for b in gate["inconclusive"])
                   + ".\n\n")
    out.append("\n## Rules\n\n")
    out.append(_table(["rule", "status", "why"],
                      [(name, MARK[r["status"]], r["why"]) for name, r in gate["rules"].items()]))
    out.append("\n## Stop signals (declared in params.yaml `gate.stop`)\n\n")
    out.append(_table(["signal", "status", "value", "threshold", "detail"],
                      [(s["name"], s["status"], _f(s["value"]), _f(s["threshold"]), s["why"])
                       for s in gate["rules"]["stop_signals"]["signals"]]))
    out.append("\n## Evidence per gated tier\n\n")
    out.append(_table(["tier", "tasks", "graded trials", "infra-excluded", "resolution",
                       "tolerance", "enough"],
                      [(t, e["tasks"], e["trials"], e["excluded_infra"], _f(e["resolution"]),
                        _f(e["tolerance"]), "yes" if e["enough"] else "no")
                       for t, e in gate["rules"]["enough_evidence"]["tiers"].items()]))
    ch = gate["changes"]
    out.append("\n## What improved, what got worse (train vs held-out)\n\n")
    out.append(_table(["tier", f"{champ['name']} pass@1", f"{cand['name']} pass@1",
                       "difference [interval]", "pass@k (k)", "verdict"],
                      [(t["tier"], _f(t["champion_pass_at_1"]), _f(t["candidate_pass_at_1"]),
                        f"{_f(t['difference'], signed=True)} [{_f(t['low'], signed=True)}, "
                        f"{_f(t['high'], signed=True)}]",
                        f"{_f(t['champion_pass_at_k'])} -> {_f(t['candidate_pass_at_k'])} "
                        f"({t['k']})", t["verdict"]) for t in ch["tiers"]]))
    if ch["families"]:
        out.append("\nPer family (point estimates of pass@1):\n\n")
        out.append(_table(["tier", "family", champ["name"], cand["name"], "difference", ""],
                          [(f["tier"], f["family"], _f(f["champion_pass_at_1"]),
                            _f(f["candidate_pass_at_1"]), _f(f["difference"], signed=True),
                            f["direction"]) for f in ch["families"]]))
    contract = gate["rules"]["contract_compliance"]
    out.append("\n## Contract compliance\n\n")
    out.append(f"{contract['unparsed']} of {contract['tool_calls']} tool calls did not parse "
               f"(rate {_f(contract['rate'])}; champion {_f(contract['champion_rate'])}; "
               f"allowed {_f(contract['max_invalid_rate'])}).\n")
    if contract["examples"]:
        out.append("\n" + _table(["tier", "task", "seed", "unparsed / turns", "stop",
                                  "trajectory"],
                                 [(e["tier"], e["task_id"], e["seed"],
                                   f"{e['n_invalid_actions']} / {e['n_turns']}",
                                   e["stop_reason"], e["trajectory_id"])
                                  for e in contract["examples"]]))
    out.append("\n## Reliability and cost\n\n")
    rows = []
    for role in ("champion", "candidate"):
        for tier, r in gate["reliability"][role].items():
            k = max(r["pass_hat_k"], key=int, default=None)
            secs = ((cost or {}).get(role) or {}).get(tier) or {}
            rows.append((f"{gate[role]['name']} ({role})", tier, r["tasks"],
                         _f(r["pass_hat_k"].get(k)) + f" (k={k})" if k else "–",
                         _f(r["turns_per_episode"], 1), _f(r["tool_calls_per_task"], 1),
                         _f(r["tokens_per_solved"], 0),
                         *((_f(secs.get("seconds_per_solved"), 1),) if cost is not None else ()),
                         r["infra_errors"]))
    out.append(_table(["checkpoint", "tier", "tasks", "pass^k", "turns / episode",
                       "tool calls / task", "tokens / solved",
                       *(("seconds / solved",) if cost is not None else ()),
                       "infra errors"], rows))
    if cost is None:
        out.append("\nSeconds per solved task are wall-clock measurements: they are in the "
                   "gate's metrics (`cost`), not in this report.\n")
    out.append("\n### The enclave's safety flags\n\n")
    sides = [(role, tier, s) for role in ("champion", "candidate")
             for tier, s in gate["safety_flags"][role].items()]
    if any(s["flagged"] for _, _, s in sides):
        out.append(_table(["checkpoint", "tier", "episodes flagged", "flags (episodes)"],
                          [(f"{gate[role]['name']} ({role})", tier,
                            f"{s['flagged']} / {s['episodes']}",
                            ", ".join(f"`{f}` {n}" for f, n in s["flags"].items()) or "–")
                           for role, tier, s in sides]))
    else:
        out.append("No verdict of either checkpoint carried a safety flag.\n")
    training = gate["training_metrics"]
    out.append("\n## Training metrics\n\n")
    out.append(f"Source: `{training['source']}`; curves: "
               f"{', '.join(f'`{c}`' for c in training['curves']) or 'none'}.\n"
               if training["source"] else "No training metrics were given for the candidate; "
               "the stop signals that need them are listed as unavailable.\n")
    if plots:
        out.append("\n## Plots\n\n")
        for title, rel in plots.items():
            out.append(f"\n**{title}**\n\n![{title}]({rel})\n")
    reg = gate.get("registry") or {}
    out.append("\n## Registry\n\n")
    if reg:
        out.append(f"Model `{reg['model']}`: candidate is version {reg['candidate_version']}, "
                   f"champion compared against is version {reg['champion_version']}; alias "
                   f"`{reg['alias']}` {'moved to the candidate' if reg['alias_moved'] else 'not moved'}"
                   f" (now version {reg['champion_now']})"
                   + ("; the candidate's rollouts are marked for discard" if reg["discard"]
                      else "") + ".\n")
    else:
        out.append("Not registered (no registry in this run).\n")
    if gate["discard"]:
        out.append("\nDiscard rollouts of: " + ", ".join(
            f"`{d['policy_version']}` (steps {d['policy_steps'] or '–'})"
            for d in gate["discard"]) + ".\n")
    return "".join(s if s.endswith("\n") else s + "\n" for s in out)


def _relabel(rows: Sequence[Mapping[str, Any]], label: str) -> list[dict]:
    return [{**r, "checkpoint": label} for r in rows]


def write_plots(plots_dir: Path | str, candidate_rows: Sequence[Mapping[str, Any]],
                champion_rows: Sequence[Mapping[str, Any]], candidate: str, champion: str,
                training: TrainingMetrics | None, keys: TrainingKeys) -> dict[str, Path]:
    """PNG files under `plots_dir`: title -> path. The pass@k curves always; the training
    curves only when the training metrics hold any of `keys`' curves."""
    plots_dir = Path(plots_dir)
    a, b = f"champion {champion}", f"candidate {candidate}"
    table = pass_at_k_table(_relabel(champion_rows, a) + _relabel(candidate_rows, b), [a, b])
    out = {"pass@k and pass^k per tier": plots_dir / "pass_at_k.png"}
    write_pass_at_k(table, out["pass@k and pass^k per tier"], None)
    if training is None:
        return out
    wanted = [("entropy", keys.entropy), ("length", keys.length), ("reward", keys.reward),
              ("parse-error rate", keys.parse_error), ("loss", keys.loss)]
    curves = [(label, key, training.series(key)) for label, key in wanted if training.series(key)]
    if not curves:
        return out
    fig, axes = pyplot().subplots(1, len(curves), figsize=(3.6 * len(curves), 3.0), squeeze=False)
    for ax, (label, key, series) in zip(axes[0], curves):
        ax.plot([s for s, _ in series], [v for _, v in series], marker="o", markersize=3)
        ax.set_title(f"{label} ({key})", fontsize=8)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = plots_dir / "training_curves.png"
    save_png(fig, path)
    out["candidate training curves"] = path
    return out


def write_report(md_path: Path | str, gate: Mapping[str, Any], *,
                 candidate_rows: Sequence[Mapping[str, Any]],
                 champion_rows: Sequence[Mapping[str, Any]],
                 training: TrainingMetrics | None, keys: TrainingKeys,
                 plots_dir: Path | str | None = None,
                 cost: Mapping[str, Any] | None = None) -> None:
    """The Markdown report at `md_path` and its PNGs (default: `<md stem>_plots/` beside
    it), linked relative to the report."""
    md_path = Path(md_path)
    plots_dir = Path(plots_dir) if plots_dir else md_path.with_name(f"{md_path.stem}_plots")
    # drawn into a fresh directory beside it, then swapped in: a killed run leaves the old
    # directory or the complete new one, never a half-written one (a DVC directory out)
    tmp = temp_dir_beside(plots_dir)
    drawn = write_plots(tmp, candidate_rows, champion_rows, gate["candidate"]["name"],
                        gate["champion"]["name"], training, keys)
    replace_dir(tmp, plots_dir)
    plots = {t: plots_dir / Path(p).name for t, p in drawn.items()}
    rel = {t: Path(p).resolve().relative_to(md_path.parent.resolve()).as_posix()
           if Path(p).resolve().is_relative_to(md_path.parent.resolve()) else str(p)
           for t, p in plots.items()}
    write_text(md_path, render_markdown(gate, cost=cost, plots=rel))
