"""Next-token pretraining of the CPU-default policy, before any demonstration (issue
"Learning I" §4).

Why: a randomly initialised 1.5 M-parameter model trained on a few hundred demonstrations
memorises transcripts but does not copy from its context — it names files and line numbers
from memory instead of from the run_tests output in front of it (measured: 0 of 128 episodes
solved). Copying must be learned from many cheap examples first. This module makes them
from the training families' code alone (no rollouts, no held-out family): each synthetic
episode injects a real bug with the synthesis operators (`rlvr.tasks.operators`),
shows a run_tests-style failure whose suspicious-lines section lists the mutated line among
other lines of the function (its true line numbers and text), and answers with the
line-addressed edit the scripted teacher would make (`rlvr.teachers.scripted.edit_args`),
tokenized exactly as an episode is (`ChatCodec`), plus chunks of the code itself. Which
tokens are trained is a knob (`PretrainParams.train_on`): all of an episode's tokens, or only
its actions; code chunks always train every token, copy drills only their edit.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlvr.agent.fixes import fix_for
from rlvr.agent.observations import HEADER as SUSPECTS_HEADER
from rlvr.agent.prompt import SYSTEM_PROMPT, TERSE_RUN_TESTS
from rlvr.agent.tools import format_tool_call
from rlvr.agent.transcript import ChatCodec
from rlvr.engines.local_policy import _repo_rel, corpus_files
from rlvr.errors import ConfigError
from rlvr.tasks.operators import OPERATORS, FunctionContext, compiles, function_names
from rlvr.tasks.spans import SourceMap
from rlvr.teachers.scripted import CANDIDATE_OPERATORS, describe_fix, edit_args, function_lines
from rlvr.train.demos import demo_row, token_hash
from rlvr.train.sft import train_sft
from rlvr.train.sft_config import SFTParams


@dataclass(frozen=True)
class PretrainParams:
    """`policy.pretrain` in params.yaml: the phase is skipped when `steps` is 0."""

    steps: int = 0                  # optimizer steps (0 = no pretraining)
    episodes: int = 3000            # synthetic repair episodes in the corpus
    code_chunk_tokens: int = 384    # training-family code, cut into chunks of this size
    learning_rate: float = 0.003
    batch_size: int = 16            # sequences per optimizer step
    seed: int = 0
    # Break the shortcut of writing a location from memory: each synthetic episode prepends
    # 0..line_shift comment lines to its file (so a line's number is not a function of its
    # text) and renames the file's directory with probability rename_paths (so its path is not
    # one of the few it has seen). Then only copying from the run_tests output predicts them.
    line_shift: int = 0
    rename_paths: float = 0.0
    # Which tokens of a synthetic episode are trained: "all" (next-token over everything) or
    # "actions" (only the assistant's turns, as in SFT). Code chunks always train every token.
    train_on: Literal["all", "actions"] = "all"
    # Short copy drills besides the episodes: run_tests' suspicious lines (shifted, renamed as
    # above) then the edit of the bug's line, no system prompt, only the edit trained. Many
    # copies per token: the location the edit names is the only thing they teach.
    drills: int = 0
    # How a synthetic episode's edit names its line: "line" (path + line number, copied from
    # run_tests), "suspect" (its rank in run_tests' suspicious lines, then `old` -> `new`) or
    # "fix" (the rank and a named rewrite, rlvr.agent.fixes: nothing copied at all; a bug no
    # single rewrite undoes keeps the "suspect" form).
    address: Literal["line", "suspect", "fix"] = "line"

    def check(self) -> None:
        if self.line_shift < 0:
            raise ConfigError(f"policy.pretrain.line_shift: {self.line_shift} < 0")
        if not 0.0 <= self.rename_paths <= 1.0:
            raise ConfigError(f"policy.pretrain.rename_paths: {self.rename_paths} not in [0, 1]")
        if self.address not in ("line", "suspect", "fix"):
            raise ConfigError(f"policy.pretrain.address: {self.address!r} (line | suspect | fix)")
        if self.drills < 0:
            raise ConfigError(f"policy.pretrain.drills: {self.drills} < 0")
        if self.train_on not in ("all", "actions"):
            raise ConfigError(f"policy.pretrain.train_on: {self.train_on!r} (all | actions)")


def _mutant(rng: random.Random, source: str, funcs: list[str], cache: dict):
    """(operator, function qualname, mutated source) of one random single-site mutant of
    the kinds the scripted teacher undoes with a line edit, or None."""
    func = rng.choice(funcs)
    op = rng.choice([o for o in CANDIDATE_OPERATORS if o in OPERATORS])
    key = (id(source), func, op)
    if key not in cache:
        try:
            cache[key] = OPERATORS[op](FunctionContext(source, func))
        except (KeyError, SyntaxError):
            cache[key] = []
    if not cache[key]:
        return None
    mutated = SourceMap(source).apply(rng.choice(cache[key]).edits)
    return (op, func, mutated) if mutated != source and compiles(mutated) else None


def _observation(rng: random.Random, path: str, func: str, mutated: str, bug_line: int,
                 span: tuple[int, int]) -> tuple[str, str, int]:
    """A run_tests observation in the shape the agent sees (rlvr.agent.executor), and its
    suspicious-lines section alone (what a copy drill shows)."""
    lines = mutated.split("\n")
    lo, hi = span
    others = [n for n in range(lo, hi + 1) if n != bug_line and lines[n - 1].strip()
              and not lines[n - 1].strip().startswith(("#", '"""', "'''", "def "))]
    rng.shuffle(others)
    shown = others[:7]
    rank = 0 if rng.random() < 0.5 else rng.randint(0, len(shown))
    shown.insert(rank, bug_line)
    n_fail, n_pass = rng.randint(1, 4), rng.randint(0, 12)
    module = path.rsplit("/", 1)[-1].removesuffix(".py")
    test = f"test_{func.split('.')[-1].strip('_')}"
    dots = "." * n_pass + "F" * n_fail
    listing = "".join(
        f"{path}:{n}: {lines[n - 1].strip()}  [{n_fail} failing, "
        f"{0 if k <= rank else rng.randint(1, n_pass or 1)} passing]\n"
        for k, n in enumerate(shown))
    suspects = f"{SUSPECTS_HEADER} (run by failing tests, not by passing ones):\n{listing}"
    return (f"{dots:<73}[100%]\n"
            f"{'=' * 35} FAILURES {'=' * 35}\n"
            f"{'_' * 20} {test} {'_' * 20}\n"
            f"tests/test_{module}.py:{rng.randint(5, 90)}: in {test}\n"
            f"    assert {func.split('.')[-1]}(...) == {rng.randint(-9, 99)}\n"
            f"E   AssertionError: assert {rng.randint(-9, 99)} == {rng.randint(-9, 99)}\n"
            f"{suspects}"
            f"{'=' * 27} short test summary info {'=' * 28}\n"
            f"FAILED tests/test_{module}.py::{test} - AssertionError\n"
            f"{n_fail} failed, {n_pass} passed\n\n[pytest exit code 1]",
            suspects.removesuffix("\n"), rank + 1)


@dataclass(frozen=True)
class RepairCase:
    """One synthetic bug: the run_tests observation that flags it and the teacher's fix."""

    path: str
    func: str
    op: str
    user: str
    observation: str
    suspects: str         # the observation's suspicious-lines section
    suspect: int          # the bug line's rank in it (1 = listed first)
    edit: dict[str, Any]  # line-addressed edit args: {path, line, old, new}
    fix: tuple[str, int] | None = None  # the named rewrite (fix, nth) that undoes the bug

    def edit_args(self, address: str) -> dict[str, Any]:
        if address == "fix" and self.fix is not None:
            name, nth = self.fix
            return {"suspect": self.suspect, "fix": name, **({"nth": nth} if nth > 1 else {})}
        if address in ("suspect", "fix"):
            return {"suspect": self.suspect, "old": self.edit["old"], "new": self.edit["new"]}
        return self.edit


def _renamed(rng: random.Random, path: str) -> str:
    """`path` under a made-up package directory (`a/b.py` -> `<word>/b.py`)."""
    word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))
    head, _, name = path.rpartition("/")
    return f"{word}/{name}" if head else f"{word}_{name}"


_SYLLABLES = ("ka", "lo", "mi", "tre", "sun", "pa", "vor", "den", "qui", "zel", "bo", "rix")


def repair_cases(code: dict[str, str], n: int, *, seed: int, line_shift: int = 0,
                 rename_paths: float = 0.0) -> list[RepairCase]:
    """`n` synthetic bugs injected into `code` (path -> text) with the synthesis operators
    (`line_shift`, `rename_paths`: see `PretrainParams`)."""
    rng = random.Random(seed)
    pool = []
    for path, source in sorted(code.items()):
        try:
            funcs = function_names(source)
        except SyntaxError:
            continue
        if funcs:
            pool.append((path, source, funcs))
    cache: dict = {}
    out: list[RepairCase] = []
    attempts = 0
    while len(out) < n and pool and attempts < 20 * n:
        attempts += 1
        path, source, funcs = rng.choice(pool)
        mutant = _mutant(rng, source, funcs, cache)
        if mutant is None:
            continue
        op, func, mutated = mutant
        shift = rng.randint(0, line_shift) if line_shift else 0
        header = "".join(f"# {rng.choice(_SYLLABLES)}{rng.choice(_SYLLABLES)}\n"
                         for _ in range(shift))
        source, mutated = header + source, header + mutated
        if rename_paths and rng.random() < rename_paths:
            path = _renamed(rng, path)
        args = edit_args(path, mutated, source)
        if "line" not in args:
            continue
        span = function_lines(mutated, func)
        obs, suspects, suspect = _observation(rng, path, func, mutated, args["line"], span)
        user = (f"A test fails in `{func.split('.')[-1]}`. Fix the bug.\n\n"
                f"Public tests: tests/")
        line = args["line"] - 1
        fix = fix_for(mutated.split("\n")[line], source.split("\n")[line])
        out.append(RepairCase(path, func, op, user, obs, suspects, suspect, args, fix))
    return out


def synthetic_episodes(code: dict[str, str], codec: ChatCodec,
                       p: PretrainParams) -> list[tuple[list[int], list[int]]]:
    """`p.episodes` tokenized repair episodes (run_tests -> line-addressed fix -> run_tests ->
    submit) as (token ids, loss mask): the mask is 1 on every token, or with
    `p.train_on: actions` on the assistant's tokens only."""
    rng = random.Random(p.seed + 1)
    out: list[tuple[list[int], list[int]]] = []
    for case in repair_cases(code, p.episodes, seed=p.seed, line_shift=p.line_shift,
                             rename_paths=p.rename_paths):
        why = describe_fix(case.op)
        turns = [(format_tool_call("run_tests", {}, TERSE_RUN_TESTS), case.observation),
                 (format_tool_call("edit", case.edit_args(p.address),
                                   f"{why[:1].upper()}{why[1:]}."),
                  f"edited {case.path}"),
                 (format_tool_call("run_tests", {}, "Check."),
                  f"{'.' * rng.randint(3, 16):<73}[100%]\n{rng.randint(3, 16)} passed\n\n"
                  "[pytest exit code 0]"),
                 (format_tool_call("submit", {}, "The public tests pass; submit the fix."), None)]
        ids = codec.initial_prompt(SYSTEM_PROMPT, case.user)
        mask = [0] * len(ids)
        for action, observation in turns:
            acted = [*codec.encode_action(action), codec.im_end]
            ids += acted
            mask += [1] * len(acted)
            if observation is not None:
                seen = codec.observation_segment(observation, close_turn=False)
                ids += seen
                mask += [0] * len(seen)
        out.append((ids, mask if p.train_on == "actions" else [1] * len(ids)))
    return out


def copy_drills(code: dict[str, str], codec: ChatCodec,
                p: PretrainParams) -> list[tuple[list[int], list[int]]]:
    """`p.drills` (token ids, loss mask): user instruction, a run_tests call, its suspicious
    lines section, then the edit (the only trained tokens)."""
    out = []
    for case in repair_cases(code, p.drills, seed=p.seed + 7, line_shift=p.line_shift,
                             rename_paths=p.rename_paths):
        ids = [*codec.header("user"), *codec.encode_text(case.user), codec.im_end,
               *codec.newline(), *codec.header("assistant"),
               *codec.encode_action(format_tool_call("run_tests", {})), codec.im_end,
               *codec.observation_segment(case.suspects, close_turn=False)]
        edit = [*codec.encode_action(format_tool_call("edit", case.edit_args(p.address))),
                codec.im_end]
        out.append((ids + edit, [0] * len(ids) + [1] * len(edit)))
    return out


def code_chunks(code: dict[str, str], codec: ChatCodec, size: int) -> list[list[int]]:
    out = []
    for path, text in sorted(code.items()):
        ids = codec.encode_text(f"# {path}\n{text}")
        out += [ids[i:i + size] for i in range(0, len(ids), size) if len(ids[i:i + size]) > 8]
    return out


def pretrain_rows(code: dict[str, str], codec: ChatCodec,
                  p: PretrainParams) -> list[dict[str, Any]]:
    """SFT_DATA-shaped rows for `rlvr.train.sft.train_sft`: synthetic episodes, copy drills and
    code chunks, each with its loss mask (see `PretrainParams.train_on`)."""
    p.check()
    seqs = synthetic_episodes(code, codec, p) + copy_drills(code, codec, p) + [
        (ids, [1] * len(ids)) for ids in code_chunks(code, codec, p.code_chunk_tokens)]
    return [demo_row({"trajectory_id": f"pretrain-{i}", "task_id": f"pretrain-{i}",
                   "family": "pretrain", "engine": "synthetic", "token_ids": ids,
                   "loss_mask": mask}, token_hash(ids)) for i, (ids, mask) in enumerate(seqs)]


def training_code(root, exclude_families) -> dict[str, str]:
    """Repo-relative path (as the agent sees it) -> text of the training families' code."""
    root = Path(root)
    return {_repo_rel(p.relative_to(root).as_posix()): p.read_text(encoding="utf-8",
                                                                    errors="replace")
            for p in corpus_files(root, exclude_families)}


def pretrain_policy(base_dir, out_dir, code: dict[str, str], p: PretrainParams, *, log=None,
                    eval_every: int = 0, on_eval=None):
    """Train `base_dir` next-token on the pretraining corpus, write it to `out_dir`
    (through the SFT loop: same batching, normaliser, atomic HF directory and card).
    `on_eval(step, model)` (e.g. `rlvr.train.copy_probe.copy_probe`) runs every `eval_every`
    steps and at the end; its numbers reach `log`."""
    codec = ChatCodec.from_model_dir(base_dir)
    rows = pretrain_rows(code, codec, p)
    params = SFTParams.next_token(seed=p.seed, learning_rate=p.learning_rate, steps=p.steps,
                                  batch_size=p.batch_size, eval_every=eval_every)
    return train_sft(base_dir, rows, [], params, out_dir, log=log, on_eval=on_eval), len(rows)
