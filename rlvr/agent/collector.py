"""Many episodes against one engine: groups of G rollouts per task, batched generation,
tools in a thread pool (SPEC §3 group sampling).

The engine is a `TokenEngine` (the policy) or a `Teacher` (engines/base.py protocols, told
apart by `isinstance`, never by probing for methods).

Token engines (the policy). Groups are processed in *waves* of `groups_per_wave`; inside a
wave the groups alternate between two cohorts. Each scheduler tick serves one cohort:

    wait for that cohort's tool calls (submitted one tick earlier)
    -> ONE engine.generate(...) over all of its episodes that wait for a turn
    -> submit their tool calls to the pool and move to the other cohort

so while the sandbox runs one cohort's tests the engine generates for the other, and the
G first-turn prompts of a group (identical, same cohort) share one prefill. Which episodes
enter which `generate` call is a pure function of the episodes' own logical states — never of
thread timing — and turn t of an episode samples from its own stream, seeded
derive_seed(reset seed, "turn", t), whatever else shares the batch: the same tasks, params
and seed give the same rollouts. A wave is also the unit of resumption for token
engines (its batches mix its groups), so a resumed run replays a partly finished wave whole
and keeps only the groups not yet on disk — identical to an uninterrupted run.

Continuous schedule (`ScheduleParams.mode = "continuous"`, engines with `stream`: the torch
engine's fast decoder). One running decode per wave (`rlvr.engines.stream`): an episode
joins it when it is ready to generate and leaves it when its turn stops; its tool call then
runs in the pool and it rejoins `join_lag_steps` decode steps later (waiting for the tool
only if it has not finished by then). Those join points count decode steps, so which
sequences share each forward pass is still a pure function of the episodes' logical states:
same rollouts for the same inputs, and ids equal to the cohort schedule's (each turn draws
from its own stream; the turn's token limit is its own `request()`, as the cohort schedule
cuts it). The lag trades a turn's latency against the engine waiting on tools: about a
tool call's duration over a decode step's. An episode's turn records the seconds from its
join to its stop as `gen_seconds`.

Text engines (teachers). Every episode is independent (its sampling seed comes from its
reset seed and turn), so whole episodes run in the pool and a group is the resumption unit.

Seeds: reset seed of sample i of task q = derive_seed(run seed, q, i); ids:
group_id = "<task_id>@s<seed>", trajectory_id = "<group_id>#<i>". A later *sampling round*
r > 0 (the same task re-sampled, e.g. by the next training step with unchanged weights) gets
group_id "<task_id>@s<seed>r<r>" and seeds derived from (run seed, q, i, "round", r), so it
neither replays nor collides with round 0; round 0 keeps the ids and seeds above.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Literal, Sequence

from rlvr.agent.drive import bind_teacher, step_text, step_token
from rlvr.agent.episode import Episode, EpisodeConfig, EpisodeSpec
from rlvr.engines.base import StreamingEngine, Teacher, TokenEngine
from rlvr.seeds import derive_seed
from rlvr.tasks.model import Task


@dataclass(frozen=True)
class ScheduleParams:
    """How a wave's token-engine episodes share the engine (module docstring); a teacher's
    episodes each run whole in the pool whatever is set here."""

    # "cohorts": two cohorts alternate, one engine.generate per tick (every token engine);
    # "continuous": one running decode that episodes join and leave (engines with `stream`)
    mode: Literal["cohorts", "continuous"] = "cohorts"
    # continuous: decode steps between an episode's tool call and its rejoining the decode
    join_lag_steps: int = 8
    # continuous: most sequences decoding at once (0 = no bound: the whole wave)
    max_slots: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("cohorts", "continuous"):
            raise ValueError(f"schedule.mode must be cohorts|continuous, got {self.mode!r}")
        for name in ("join_lag_steps", "max_slots"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"schedule.{name} must be an int >= 0, got {v!r}")


@dataclass
class GroupResult:
    index: int
    task: Task
    group_id: str
    episodes: list[Episode]


def group_id_for(task_id: str, seed: int, sampling_round: int = 0) -> str:
    base = f"{task_id}@s{seed}"
    return f"{base}r{sampling_round}" if sampling_round else base


def trajectory_id_for(group_id: str, i: int) -> str:
    return f"{group_id}#{i}"


def round_parts(sampling_round: int) -> tuple:
    """What a sampling round adds to every seed derivation (nothing in round 0)."""
    if sampling_round < 0:
        raise ValueError(f"sampling_round must be >= 0 (got {sampling_round})")
    return ("round", sampling_round) if sampling_round else ()


def episode_specs(task: Task, group_size: int, seed: int,
                  sampling_round: int = 0) -> list[EpisodeSpec]:
    gid = group_id_for(task.task_id, seed, sampling_round)
    extra = round_parts(sampling_round)
    return [EpisodeSpec(task=task, group_id=gid, trajectory_id=trajectory_id_for(gid, i),
                        sample_index=i, reset_seed=derive_seed(seed, task.task_id, i, *extra))
            for i in range(group_size)]


def release(ep: Episode) -> None:
    """What an episode that will not `finish()` holds, released now: its tool executor (the
    warm run_tests server, a sandboxed process tree that would otherwise live until garbage
    collection) and its workspace. Idempotent; `Episode.finish` does the same on success."""
    try:
        if ep.executor is not None:
            ep.executor.close()
    finally:
        if ep.workspace is not None:
            ep.workspace.close()


# ---- the collector ---------------------------------------------------------------------------
class Collector:
    def __init__(self, engine: TokenEngine | Teacher, config: EpisodeConfig, *, group_size: int,
                 workers: int = 2, groups_per_wave: int = 8, sampling_round: int = 0,
                 schedule: ScheduleParams = ScheduleParams()):
        if group_size < 1 or workers < 1 or groups_per_wave < 1:
            raise ValueError("group_size, workers and groups_per_wave must be >= 1")
        self.token = isinstance(engine, TokenEngine)
        if not self.token and not isinstance(engine, Teacher):
            raise TypeError(f"{type(engine).__name__} is neither a TokenEngine nor a Teacher "
                            "(rlvr/engines/base.py)")
        if schedule.mode == "continuous" and self.token \
                and not isinstance(engine, StreamingEngine):
            raise ValueError(f"schedule.mode continuous: engine {engine.name!r} cannot decode "
                             "continuously (the torch engine can); use cohorts")
        self.schedule = schedule
        round_parts(sampling_round)  # validates it
        self.sampling_round = sampling_round
        self.engine = engine
        self.cfg = config
        self.group_size = group_size
        self.workers = workers
        self.groups_per_wave = groups_per_wave
        self.engine_name = engine.name
        # what this run spent (a resumed run counts only its own part)
        self.stats = {"generate_calls": 0, "generate_seconds": 0.0, "generate_prompts": 0,
                      "wall_seconds": 0.0}
        self._lock = threading.Lock()

    def units(self, tasks: Sequence[Task]) -> list[list[int]]:
        """Resumption units as lists of group indices: waves (token) or groups (text)."""
        size = self.groups_per_wave if self.token else 1
        return [list(range(i, min(i + size, len(tasks)))) for i in range(0, len(tasks), size)]

    def run(self, tasks: Sequence[Task], *, done: Iterable[str] = (),
            on_group: Callable[[GroupResult], None]) -> None:
        """Roll out G episodes for every task whose group id is not in `done`; `on_group`
        receives each finished group (from the calling thread)."""
        started = time.perf_counter()
        try:
            self._run(tasks, set(done), on_group)
        finally:
            self.stats["wall_seconds"] += time.perf_counter() - started

    def _count(self, seconds: float, prompts: int, calls: int | None = None) -> None:
        """Engine time; `calls`: generate calls (default: one if any prompt), or decode
        steps of a continuous schedule."""
        with self._lock:
            self.stats["generate_calls"] += (1 if prompts else 0) if calls is None else calls
            self.stats["generate_seconds"] += seconds
            self.stats["generate_prompts"] += prompts

    def _run(self, tasks: Sequence[Task], done: set[str],
             on_group: Callable[[GroupResult], None]) -> None:
        seed = self.cfg.run_seed
        todo_units = [u for u in self.units(tasks)
                      if any(group_id_for(tasks[i].task_id, seed, self.sampling_round)
                             not in done for i in u)]
        with ThreadPoolExecutor(max_workers=self.workers,
                                thread_name_prefix="rlvr-tools") as pool:
            if self.token:
                for unit in self.units(tasks):
                    if unit not in todo_units:
                        continue
                    for result in self._run_wave(pool, tasks, unit):
                        if result.group_id not in done:
                            on_group(result)
            else:
                self._run_text(pool, tasks, [u[0] for u in todo_units], on_group)

    # ---- text engines ----------------------------------------------------------------------
    def _run_text(self, pool: ThreadPoolExecutor, tasks: Sequence[Task], indices: list[int],
                  on_group: Callable[[GroupResult], None]) -> None:
        def one(spec: EpisodeSpec) -> Episode:
            ep = Episode(spec, self.cfg, engine_name=self.engine_name)
            teacher = bind_teacher(self.engine, spec.task)
            try:
                ep.start()
                while not ep.done:
                    if ep.state == "generate":
                        self._count(step_text(teacher, ep, self.cfg), 1)
                    else:
                        ep.run_tool()
            finally:
                if ep.done:
                    ep.finish()
                else:
                    release(ep)
            return ep

        submitted: list[tuple[int, list[Future]]] = []
        try:
            for i in indices:
                specs = episode_specs(tasks[i], self.group_size, self.cfg.run_seed,
                                      self.sampling_round)
                submitted.append((i, [pool.submit(one, s) for s in specs]))
            for i, futures in submitted:
                episodes = [f.result() for f in futures]
                on_group(GroupResult(i, tasks[i], episodes[0].spec.group_id, episodes))
        except BaseException:
            for _, futures in submitted:
                for f in futures:
                    f.cancel()
            raise

    # ---- token engines ---------------------------------------------------------------------
    def _run_wave(self, pool: ThreadPoolExecutor, tasks: Sequence[Task],
                  unit: list[int]) -> list[GroupResult]:
        groups: list[tuple[int, list[Episode]]] = []
        for i in unit:
            specs = episode_specs(tasks[i], self.group_size, self.cfg.run_seed,
                                  self.sampling_round)
            groups.append((i, [Episode(s, self.cfg, engine_name=self.engine_name)
                               for s in specs]))
        everyone = [ep for _, eps in groups for ep in eps]
        try:
            for f in [pool.submit(ep.start) for ep in everyone]:
                f.result()
            if self.schedule.mode == "continuous":
                self._continuous(pool, everyone)
            else:
                self._cohorts(pool, groups, everyone)
            for f in [pool.submit(ep.finish) for ep in everyone]:
                f.result()
        except BaseException:
            for ep in everyone:
                release(ep)
            raise
        return [GroupResult(i, tasks[i], eps[0].spec.group_id, eps) for i, eps in groups]

    def _cohorts(self, pool: ThreadPoolExecutor, groups: list[tuple[int, list[Episode]]],
                 everyone: list[Episode]) -> None:
        cohorts = [[ep for k, (_, eps) in enumerate(groups) if k % 2 == c for ep in eps]
                   for c in (0, 1)]
        tools: dict[int, Future] = {}
        tick = 0
        while any(not ep.done for ep in everyone) or tools:
            cohort = cohorts[tick % 2]
            for ep in cohort:
                fut = tools.pop(id(ep), None)
                if fut is not None:
                    fut.result()
            waiting = [ep for ep in cohort if ep.state == "generate"]
            if waiting:
                self._count(step_token(self.engine, waiting, self.cfg), len(waiting))
            for ep in cohort:
                if ep.state == "tool":
                    tools[id(ep)] = pool.submit(ep.run_tool)
            tick += 1

    def _continuous(self, pool: ThreadPoolExecutor, everyone: list[Episode]) -> None:
        """The continuous schedule (module docstring). `waiting` holds (join step, wave
        index, episode); the step count jumps ahead when nothing is decoding."""
        cfg, lag = self.cfg, self.schedule.join_lag_steps
        stream = self.engine.stream(cfg.sampling(cfg.budgets.max_new_tokens_per_turn),
                                    seed=cfg.run_seed, max_slots=self.schedule.max_slots)
        waiting = [(0, k) for k in range(len(everyone))]
        tools: dict[int, Future] = {}
        turn: dict[int, tuple] = {}  # wave index -> (limit, seed, version, step, joined at)
        step = 0
        try:
            while waiting or stream.active:
                if not stream.active:
                    step = max(step, min(j for j, _ in waiting))
                due = sorted(w for w in waiting if w[0] <= step)
                waiting = [w for w in waiting if w[0] > step]
                for _, k in due:
                    ep = everyone[k]
                    fut = tools.pop(k, None)
                    if fut is not None:
                        fut.result()
                    if ep.state != "generate" or (n := ep.check_budget()) <= 0:
                        continue
                    seed = ep.turn_seed()
                    turn[k] = (n, seed, self.engine.policy_version, self.engine.policy_step,
                               time.perf_counter())
                    stream.add(k, ep.transcript.token_ids, sample_seed=seed, max_new_tokens=n)
                if not stream.active:
                    continue
                started = time.perf_counter()
                finished = stream.step()
                self._count(time.perf_counter() - started, len(finished), calls=1)
                step += 1
                for k, sample in finished:
                    ep = everyone[k]
                    n, seed, version, policy_step, joined = turn.pop(k)
                    ep.accept_sample(sample.token_ids, sample.logprobs, limit=n,
                                     policy_version=version, policy_step=policy_step,
                                     sample_seed=seed, gen_seconds=time.perf_counter() - joined)
                    if ep.state == "tool":
                        tools[k] = pool.submit(ep.run_tool)
                        waiting.append((step + lag, k))
                    elif ep.state == "generate":  # an invalid action's error was observed
                        waiting.append((step, k))
        finally:
            for fut in tools.values():
                fut.cancel()
            stream.close()
