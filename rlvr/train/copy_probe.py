"""Can the model copy a location out of its context? The probe of next-token pretraining
(`rlvr.train.pretrain`, bench/learning_sweep.py): before demonstrations can teach a policy to
fix anything, it must read `path:line` off a run_tests observation in front of it rather than
recall one from memory. Greedy decoding on synthetic bugs, no sandbox, no verifier."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from rlvr.agent.observations import suspicious_lines
from rlvr.agent.prompt import SYSTEM_PROMPT, TERSE_RUN_TESTS
from rlvr.agent.tools import format_tool_call, parse_action
from rlvr.train.pretrain import RepairCase


def copy_probe(cases: Sequence[RepairCase], codec, *, max_new_tokens: int = 96,
               batch: int = 8) -> Callable[[int, Any], dict[str, float]]:
    """`on_eval(step, model)`: can the model copy a location out of its context?

    Each case is a synthetic bug (`rlvr.train.pretrain.repair_cases`) shown as a run_tests
    observation whose suspicious lines name `path:line`; the model answers greedily and the
    probe reads its first action. Rates over cases: the action parses (`parsed`), is an edit
    (`edit`), names a flagged file (`path_flagged`), a flagged (path, line) (`line_flagged`),
    the bug's line (`bug_line`), and `old` occurs in that line's text (`old_in_line`). On
    code the model never trained on (held-out families) a flagged path can only be copied —
    the skill a student needs before demonstrations can teach it to fix anything."""
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


def _copy_profile(case: RepairCase, action) -> dict[str, bool]:
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
