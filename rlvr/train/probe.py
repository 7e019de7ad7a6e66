"""The SPEC §6 SFT stop signal: the parse-error rate of rollouts *sampled* from the model
being trained (teacher-forced loss says nothing about whether free-running tool calls parse).

Policy side only: the probe rolls the in-memory model out on a few fixed tasks in the policy
sandbox and counts invalid actions; nothing is verified (no enclave), so it is cheap enough
to run at every SFT evaluation.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rlvr.agent.observations import suspicious_lines
from rlvr.agent.passport import parse_error_rate
from rlvr.agent.rollout import RolloutParams, roll_out
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import Task

if TYPE_CHECKING:
    from rlvr.train.pretrain import RepairCase


def parse_error_probe(tasks: Sequence[Task], params: RolloutParams, sandbox_params: SandboxParams,
                      *, sandbox=None, tokenizer=None) -> Callable[[int, Any], dict[str, float]]:
    """`on_eval(step, model)` for `rlvr.train.sft.train_sft`: one rollout per task with the
    model as a torch engine (`params` gives budgets and decoding; its engine fields are
    ignored); each evaluation step is its own sampling round, so probes never replay. It
    samples without `decoding.grammar`: the signal is whether the *weights* have learned the
    format, which a grammar would hide (it forces every call to parse)."""
    from rlvr.engines.model_dir import load_tokenizer
    from rlvr.engines.torch_engine import TorchEngine
    from rlvr.sandbox import get_sandbox

    tok = tokenizer or load_tokenizer(params.model_dir)
    box = sandbox or get_sandbox(sandbox_params.backend)
    probe = dataclasses.replace(params, engine="torch", group_size=1, policy_version="",
                                decoding=dataclasses.replace(params.decoding, grammar=""))

    def on_eval(step: int, model) -> dict[str, float]:
        engine = TorchEngine.from_model(model, tok, policy_version=f"sft-step{step}",
                                        policy_step=step)
        rows = roll_out(list(tasks), probe, sandbox_params, None, engine=engine, sandbox=box,
                        sampling_round=step)
        submitted = sum(r["stop_reason"] == "submitted" for r in rows)
        return {"parse_error_rate": parse_error_rate(rows),
                "submitted_rate": submitted / len(rows) if rows else 0.0}

    return on_eval


def copy_probe(cases: Sequence["RepairCase"], codec, *, max_new_tokens: int = 96,
               batch: int = 8) -> Callable[[int, Any], dict[str, float]]:
    """`on_eval(step, model)`: can the model copy a location out of its context?

    Each case is a synthetic bug (`rlvr.train.pretrain.repair_cases`) shown as a run_tests
    observation whose suspicious lines name `path:line`; the model answers greedily and the
    probe reads its first action. Rates over cases: the action parses (`parsed`), is an edit
    (`edit`), names a flagged file (`path_flagged`), a flagged (path, line) (`line_flagged`),
    the bug's line (`bug_line`), and `old` occurs in that line's text (`old_in_line`). On
    code the model never trained on (held-out families) a flagged path can only be copied —
    the skill a student needs before demonstrations can teach it to fix anything."""
    import torch

    from rlvr.agent.prompt import SYSTEM_PROMPT
    from rlvr.agent.tools import format_tool_call, parse_action
    from rlvr.agent.prompt import TERSE_RUN_TESTS

    prompts = []
    for case in cases:
        ids = codec.initial_prompt(SYSTEM_PROMPT, case.user)
        ids += [*codec.encode_action(format_tool_call("run_tests", {}, TERSE_RUN_TESTS)),
                codec.im_end]
        prompts.append(ids + codec.observation_segment(case.observation, close_turn=False))
    keys = ("parsed", "edit", "path_flagged", "line_flagged", "bug_line", "old_in_line", "fixed")

    def on_eval(step: int, model) -> dict[str, float]:
        counts = dict.fromkeys(keys, 0)
        for lo in range(0, len(prompts), batch):
            chunk = prompts[lo:lo + batch]
            width = max(map(len, chunk))
            pad = codec.im_end
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                     max_new_tokens=max_new_tokens, eos_token_id=codec.im_end,
                                     pad_token_id=pad)
            for case, row in zip(cases[lo:lo + batch], out[:, width:].tolist()):
                text = codec.decode(row[:row.index(pad)] if pad in row else row)
                for k, hit in _copy_profile(case, parse_action(text)).items():
                    counts[k] += hit
        return {f"copy_{k}": v / max(1, len(prompts)) for k, v in counts.items()}

    return on_eval


def _copy_profile(case, action) -> dict[str, bool]:
    call = action.call
    if call is None:
        return {}
    args = call.args
    listed = suspicious_lines(case.observation)
    shown = {(s.path, s.line): s.text for s in listed}
    where = (args.get("path"), args.get("line"))
    if "suspect" in args:  # addressed by rank: the listing says where
        k = args["suspect"]
        where = (listed[k - 1].path, listed[k - 1].line) if 1 <= k <= len(listed) else (None, None)
    return {"parsed": True, "edit": call.name == "edit",
            "path_flagged": call.name == "edit" and where[0] in {p for p, _ in shown},
            "line_flagged": call.name == "edit" and where in shown,
            "bug_line": call.name == "edit" and where == (case.edit["path"], case.edit["line"]),
            "old_in_line": call.name == "edit" and where in shown
            and bool(args.get("old")) and args["old"] in shown[where],
            "fixed": call.name == "edit" and where == (case.edit["path"], case.edit["line"])
            and (args.get("old") == case.edit["old"] and args.get("new") == case.edit["new"]
                 or case.fix is not None
                 and (args.get("fix"), args.get("nth", 1)) == case.fix)}
