"""The trainers' shape (issue #34), read from their source: the GRPO loop fits on one screen
and takes its state as one object, no function under rlvr/train takes a long positional
argument list, and only the SFT modules build `SFTParams` (GRPO and pretraining reach the
optimizer backend through `BackendParams`, not through a fake SFT run)."""
from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

from rlvr.train import grpo

ROOT = Path(__file__).resolve().parents[1]
TRAIN = sorted((ROOT / "rlvr" / "train").glob("*.py"))
MAX_POSITIONAL = 8


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_the_grpo_loop_fits_one_screen_and_takes_one_state_object():
    source, _ = inspect.getsourcelines(grpo.loop)
    assert len(source) <= 60, f"grpo.loop is {len(source)} lines"
    params = list(inspect.signature(grpo.loop).parameters.values())
    assert [p.name for p in params] == ["run"]
    run_type = inspect.get_annotations(grpo.loop, eval_str=True)["run"]
    assert run_type is grpo.Run and dataclasses.is_dataclass(run_type)
    assert "state" in {f.name for f in dataclasses.fields(run_type)}


def test_no_function_in_the_trainers_takes_more_than_eight_positional_parameters():
    long = [f"{path.name}:{fn.lineno} {fn.name} ({n})" for path in TRAIN
            for fn in _functions(path)
            if (n := len(fn.args.posonlyargs) + len(fn.args.args)) > MAX_POSITIONAL]
    assert long == []


def test_the_checker_counts_positional_parameters(tmp_path):
    """Not vacuous: a nine-parameter function is caught, keyword-only ones are not counted."""
    path = tmp_path / "m.py"
    path.write_text("def f(a, b, c, d, e, f, g, h, i):\n    pass\n"
                    "def g(a, b, c, d, e, f, g, h, *, i, j):\n    pass\n")
    counts = {fn.name: len(fn.args.posonlyargs) + len(fn.args.args) for fn in _functions(path)}
    assert counts == {"f": 9, "g": 8}


def test_sft_params_are_built_only_by_the_sft_modules():
    builders = []
    for path in sorted((ROOT / "rlvr").rglob("*.py")):
        if path.parent.name == "train" and path.name.startswith("sft"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            called = getattr(node, "func", None)
            if isinstance(node, ast.Call) and "SFTParams" in (getattr(called, "id", None),
                                                              getattr(called, "attr", None)):
                builders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert builders == []
