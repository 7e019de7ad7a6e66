"""An engine meets an episode: one generation step, and one episode driven alone.

The collector (many episodes, batched, tools in a pool) and `run_episode` (one episode, in
the calling thread) take their turns through the same two steps, so a turn is sampled,
seeded and recorded the same way on both paths:

* `step_token(engine, episodes, config)` — one batched `generate` of a `TokenEngine`;
* `step_text(teacher, episode, config)` — one turn of a teacher bound to the episode
  (`bind_teacher`).

The episode's state machine (`rlvr.agent.episode`) decides everything else.
"""
from __future__ import annotations

import time
from typing import Sequence

from rlvr.agent.episode import Episode, EpisodeConfig, EpisodeSpec, teacher_view
from rlvr.engines.base import Teacher, TextEngine, TokenEngine
from rlvr.tasks.model import Task


def step_token(engine: TokenEngine, episodes: Sequence[Episode], config: EpisodeConfig) -> float:
    """One batched `generate` for every episode that may still generate; turn t of an
    episode samples with the per-prompt seed derive_seed(reset_seed, "turn", t). The turn
    records the engine's `policy_version` and `policy_step` at sampling time."""
    limits = [ep.check_budget() for ep in episodes]
    live = [(ep, n) for ep, n in zip(episodes, limits) if n > 0]
    if not live:
        return 0.0
    params = config.sampling(max(n for _, n in live))
    prompts = [ep.transcript.token_ids for ep, _ in live]
    seeds = [ep.turn_seed() for ep, _ in live]
    version, step = engine.policy_version, engine.policy_step
    started = time.perf_counter()
    samples = engine.generate(prompts, params, seed=config.run_seed, sample_seeds=seeds)
    elapsed = time.perf_counter() - started
    if len(samples) != len(live):
        raise RuntimeError(f"engine {engine.name} returned {len(samples)} samples for "
                           f"{len(live)} prompts")
    for (ep, n), sample, s in zip(live, samples, seeds):
        ep.accept_sample(sample.token_ids, sample.logprobs, limit=n, policy_version=version,
                         policy_step=step, sample_seed=s, gen_seconds=elapsed,
                         sampled_by=str(sample.extras.get("server", "")))
    return elapsed


def step_text(teacher: TextEngine, episode: Episode, config: EpisodeConfig) -> float:
    """One teacher turn. A failing teacher (network, server) is an infrastructure error."""
    n = episode.check_budget()
    if n <= 0:
        return 0.0
    seed = episode.turn_seed()
    started = time.perf_counter()
    try:
        text = teacher.chat(list(episode.messages), seed=seed, max_tokens=n)
    except Exception as exc:  # noqa: BLE001 - recorded as infra_error on this rollout
        episode.infra_failure(f"teacher failed: {type(exc).__name__}: {exc}")
        return time.perf_counter() - started
    elapsed = time.perf_counter() - started
    episode.accept_text(text, limit=n, policy_version=teacher.policy_version,
                        sample_seed=seed, gen_seconds=elapsed)
    return elapsed


def bind_teacher(teacher: Teacher, task: Task) -> TextEngine:
    """The teacher bound to one episode of `task`, which it sees as `teacher_view(task)`
    (the scripted teacher plans from it; a stateless teacher returns itself)."""
    return teacher.for_task(teacher_view(task))


def run_episode(spec: EpisodeSpec, engine: TokenEngine | Teacher,
                config: EpisodeConfig) -> Episode:
    """Drive one episode alone (text teachers; single-episode checks for token engines)."""
    token = isinstance(engine, TokenEngine)
    episode = Episode(spec, config, engine_name=engine.name)
    episode.start()
    bound = None if token else bind_teacher(engine, spec.task)
    while not episode.done:
        if episode.state == "generate":
            if token:
                step_token(engine, [episode], config)
            else:
                step_text(bound, episode, config)
        elif episode.state == "tool":
            episode.run_tool()
    episode.finish()
    return episode
