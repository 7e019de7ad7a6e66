"""Difficulty-band task sampling for GRPO (SPEC §1 "Difficulty", §7 "Dynamic sampling").

A group of G binary rewards of a task with success rate p is informative with probability
P_info(p, G) = 1 − p^G − (1−p)^G: tasks the policy never or always solves give no gradient.
The sampler keeps, per task, its recent outcomes (the last `window` verified results) — so
p̂ = successes / count comes *with its count* — and draws tasks by band:

    unseen  count = 0                  explored first inside the band share (weight 1)
    band    p_low < p̂ < p_high         weight P_info(p̂, G): most signal per rollout
    hard    p̂ ≤ p_low                  `hard_share` of the slots, uniform: frontier growth
    easy    p̂ ≥ p_high                 `easy_share` of the slots, uniform: forgetting

Each slot of a draw picks its pool by those shares; an empty pool passes the slot on (band →
hard → easy), so when nothing is in the band (a policy that solves nothing) every slot
revisits hard tasks. No task is ever removed: a task that failed one group is hard, and a
hard task keeps a positive probability in every draw (`hard_share` > 0 is enforced).

The batch's informative probability is the *mean over tasks* of P_info(p̂_task, G)
(`p_info_mean`), never P_info of the pooled rate: a pooled 0.5 can be tasks at 0.01 and 0.99.
The selection distribution (per band, per task) is the curriculum report.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rlvr.errors import ConfigError
from rlvr.rl.groups import p_info
from rlvr.seeds import derive_seed

BANDS = ("unseen", "band", "hard", "easy")


@dataclass(frozen=True)
class CurriculumParams:
    """`grpo.curriculum` in params.yaml."""

    window: int = 16
    """Recent verified outcomes kept per task; p̂ = successes / count over them."""
    p_low: float = 0.05
    """p̂ at or below this is `hard` (a never-solved task is hard after its first group)."""
    p_high: float = 0.95
    """p̂ at or above this is `easy`."""
    easy_share: float = 0.1
    """Expected share of a draw's slots given to easy tasks (forgetting probe)."""
    hard_share: float = 0.2
    """Expected share given to hard tasks (frontier probe); > 0, so no task is ever
    dropped for good."""

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ConfigError(f"curriculum.window: must be >= 1, got {self.window}")
        if not 0.0 <= self.p_low < self.p_high <= 1.0:
            raise ConfigError(f"curriculum.p_low/p_high: need 0 <= p_low < p_high <= 1, got "
                              f"{self.p_low} / {self.p_high}")
        if not 0.0 < self.hard_share < 1.0:
            raise ConfigError(f"curriculum.hard_share: must be in (0, 1) (0 would drop hard "
                              f"tasks for good), got {self.hard_share}")
        if not 0.0 <= self.easy_share < 1.0 or self.easy_share + self.hard_share >= 1.0:
            raise ConfigError(f"curriculum.easy_share: must be >= 0 with easy_share + "
                              f"hard_share < 1, got {self.easy_share} + {self.hard_share}")


@dataclass
class TaskStat:
    """One task's recent record: outcomes (1 verified success, 0 failure; newest last, at
    most `window`), and how often it was selected / rolled out as a group."""

    task_id: str
    outcomes: list[int] = field(default_factory=list)
    selected: int = 0

    @property
    def count(self) -> int:
        return len(self.outcomes)

    @property
    def p_hat(self) -> float | None:
        return sum(self.outcomes) / len(self.outcomes) if self.outcomes else None


class Curriculum:
    """The sampler's state over a fixed task pool (ids in the order given)."""

    def __init__(self, task_ids: Sequence[str], params: CurriculumParams, group_size: int,
                 seed: int):
        if not task_ids:
            raise ConfigError("curriculum: no tasks to sample from")
        if len(set(task_ids)) != len(task_ids):
            raise ConfigError("curriculum: task ids must be unique")
        self.params, self.group_size, self.seed = params, group_size, seed
        self.stats = {t: TaskStat(t) for t in task_ids}
        self.draws: list[dict[str, int]] = []  # per draw: band -> tasks selected

    # ---- bands and weights ----------------------------------------------------------------
    def band(self, task_id: str) -> str:
        p = self.stats[task_id].p_hat
        if p is None:
            return "unseen"
        if p <= self.params.p_low:
            return "hard"
        if p >= self.params.p_high:
            return "easy"
        return "band"

    def p_info_mean(self, task_ids: Iterable[str] | None = None) -> float | None:
        """Mean over the (seen) tasks of P_info(p̂_task, G); None if none was seen yet."""
        ps = [self.stats[t].p_hat for t in (task_ids if task_ids is not None else self.stats)]
        ps = [p for p in ps if p is not None]
        if not ps:
            return None
        return sum(float(p_info(p, self.group_size)) for p in ps) / len(ps)

    # ---- selection --------------------------------------------------------------------------
    def select(self, n: int, draw_index: int) -> list[str]:
        """`n` distinct tasks for draw `draw_index` (seeded by it: the same state and index
        give the same tasks, so a resumed run draws what the killed one would have)."""
        if n < 1:
            raise ConfigError(f"curriculum: must select >= 1 task, got {n}")
        rng = random.Random(derive_seed(self.seed, draw_index))
        pools: dict[str, list[str]] = {b: [] for b in BANDS}
        for t in self.stats:
            pools[self.band(t)].append(t)
        p = self.params
        shares = {"band": 1.0 - p.easy_share - p.hard_share, "hard": p.hard_share,
                  "easy": p.easy_share}
        fallback = {"band": ("band", "hard", "easy"), "hard": ("hard", "band", "easy"),
                    "easy": ("easy", "band", "hard")}
        chosen: list[str] = []
        counts = {b: 0 for b in BANDS}
        for _ in range(min(n, len(self.stats))):
            r, acc, slot = rng.random(), 0.0, "easy"
            for name in ("band", "hard", "easy"):
                acc += shares[name]
                if r < acc:
                    slot = name
                    break
            for name in fallback[slot]:
                cands = pools["unseen"] + pools["band"] if name == "band" else pools[name]
                if cands:
                    pick = self._pick(rng, name, cands)
                    band = self.band(pick)
                    pools[band].remove(pick)
                    chosen.append(pick)
                    counts[band] += 1
                    break
        for t in chosen:
            self.stats[t].selected += 1
        self.draws.append(counts)
        return chosen

    def _pick(self, rng: random.Random, pool: str, cands: list[str]) -> str:
        """Band slots: weight P_info(p̂, G) (1 for unseen tasks); hard / easy: uniform."""
        if pool != "band":
            return cands[rng.randrange(len(cands))]
        weights = [1.0 if self.stats[t].p_hat is None
                   else float(p_info(self.stats[t].p_hat, self.group_size)) for t in cands]
        total = sum(weights)
        if total <= 0:
            return cands[rng.randrange(len(cands))]
        x, acc = rng.random() * total, 0.0
        for t, w in zip(cands, weights):
            acc += w
            if x < acc:
                return t
        return cands[-1]

    # ---- updates ------------------------------------------------------------------------
    def update(self, task_id: str, outcomes: Iterable[float | None]) -> None:
        """Record a group's verified outcomes (None: an infra error, which says nothing about
        the task and is not counted)."""
        st = self.stats[task_id]
        st.outcomes.extend(int(o >= 1.0) for o in outcomes if o is not None)
        del st.outcomes[:-self.params.window]

    # ---- report and state ---------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """The curriculum report: per band the tasks now in it and how often that band was
        drawn; per task p̂, count, band and times selected; P_info averaged per task."""
        bands = {b: [t for t in self.stats if self.band(t) == b] for b in BANDS}
        seen = [s.p_hat for s in self.stats.values() if s.p_hat is not None]
        pim = self.p_info_mean()
        return {
            "group_size": self.group_size,
            "tasks": len(self.stats),
            "tasks_by_band": {b: len(v) for b, v in bands.items()},
            "selected_by_band": {b: sum(d.get(b, 0) for d in self.draws) for b in BANDS},
            "draws": len(self.draws),
            "p_info_mean": pim,
            "expected_draws_per_informative_group": (1.0 / pim) if pim else None,
            "p_hat_mean": sum(seen) / len(seen) if seen else None,
            "per_task": [{"task_id": s.task_id, "p_hat": s.p_hat, "count": s.count,
                          "band": self.band(s.task_id), "selected": s.selected}
                         for s in self.stats.values()],
        }

    def state(self) -> dict[str, Any]:
        return {"stats": {t: {"outcomes": list(s.outcomes), "selected": s.selected}
                          for t, s in self.stats.items()},
                "draws": [dict(d) for d in self.draws]}

    def load_state(self, state: Mapping[str, Any]) -> None:
        if set(state["stats"]) != set(self.stats):
            raise ConfigError("curriculum: the saved state is of another task pool")
        for t, s in state["stats"].items():
            self.stats[t].outcomes = list(s["outcomes"])
            self.stats[t].selected = int(s["selected"])
        self.draws = [dict(d) for d in state["draws"]]
