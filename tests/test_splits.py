"""The function-level split inside training families and split hygiene (SPEC §1, §8)."""
from __future__ import annotations

import types

import pytest
import yaml

from rlvr.config import parse
from rlvr.errors import ConfigError
from rlvr.tasks.model import Task
from rlvr.tasks.splits import (SplitLeak, SplitParams, assign_split, check_split_hygiene,
                               function_unit, is_heldout_function, mutated_functions)
from rlvr.authoring.synth.candidates import Candidate, Part
from rlvr.tasks.operators import Site

NAMES = [f"mod{i // 40}.Class{i % 40}.method" for i in range(4000)]


def _held(family: str, params: SplitParams, names=NAMES) -> set[str]:
    return {n for n in names if is_heldout_function(family, n, params)}


def test_assignment_is_stable_and_independent_of_the_other_functions():
    p = SplitParams()
    whole = _held("fam", p)
    # Deciding on a subset, in another order, gives the same answer per function.
    subset = NAMES[::7][::-1]
    assert _held("fam", p, subset) == whole & set(subset)
    assert all(is_heldout_function("fam", n, SplitParams()) == (n in whole) for n in NAMES[:200])
    # Pinned values: a change to the hash would silently move functions across the line.
    assert function_unit(0, "textkit", "levenshtein") == pytest.approx(0.0809202783)
    assert is_heldout_function("textkit", "levenshtein", p)
    assert not is_heldout_function("textkit", "slugify", p)


def test_seed_and_family_change_the_held_out_set():
    p0, p1 = SplitParams(seed=0), SplitParams(seed=1)
    a, b = _held("fam", p0), _held("fam", p1)
    assert a != b and a & b  # different sets, overlapping about share^2
    assert _held("other", p0) != a


@pytest.mark.parametrize("share", [0.05, 0.2, 0.5])
def test_held_out_share_matches_the_param(share):
    got = len(_held("fam", SplitParams(heldout_function_share=share))) / len(NAMES)
    # Binomial(4000, share): 4 standard deviations at most ~0.032.
    assert abs(got - share) < 4 * (share * (1 - share) / len(NAMES)) ** 0.5


def test_share_zero_holds_out_nothing_and_a_larger_share_is_a_superset():
    assert not _held("fam", SplitParams(heldout_function_share=0.0))
    assert _held("fam", SplitParams(heldout_function_share=0.1)) <= \
        _held("fam", SplitParams(heldout_function_share=0.3))


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, True])
def test_share_outside_unit_interval_is_a_config_error_naming_the_key(bad):
    with pytest.raises(ConfigError, match=r"split\.heldout_function_share"):
        parse(SplitParams, {"heldout_function_share": bad}, "split")


def test_params_yaml_split_section_parses():
    with open("params.yaml") as fh:
        section = yaml.safe_load(fh)["split"]
    p = parse(SplitParams, section, "split")
    assert 0.0 <= p.heldout_function_share < 1.0 and isinstance(p.seed, int)


# ---- assign_split over real provenance shapes ---------------------------------------------------
FAMILY = types.SimpleNamespace(content_hash="c0ffee", not_passing_on_seed=(), dropped_modules=())


def _fn(params: SplitParams, held: bool, family: str = "fam") -> str:
    return next(n for n in NAMES if is_heldout_function(family, n, params) == held)


def _provenance(*functions: str) -> dict:
    parts = tuple(Part("pkg/mod.py", f, Site("comparison_flip", {"line": 3 + i}, ()))
                  for i, f in enumerate(functions))
    cand = Candidate("fam", parts[0].site.operator if len(parts) == 1 else "combined", parts)
    return cand.provenance(FAMILY, seed=0)


def test_single_bug_task_follows_its_function():
    p = SplitParams()
    held, kept = _fn(p, True), _fn(p, False)
    assert mutated_functions(_provenance(held)) == [held]
    assert assign_split("fam", p, _provenance(held)) == "heldout_function"
    assert assign_split("fam", p, _provenance(kept)) == "train"


def test_two_bug_task_is_held_out_when_either_part_is():
    p = SplitParams()
    held, kept = _fn(p, True), [n for n in NAMES if not is_heldout_function("fam", n, p)][:2]
    prov = _provenance(kept[0], held)
    # The top-level `function` names only the first part: every part must be read.
    assert prov["function"] == kept[0]
    assert mutated_functions(prov) == [kept[0], held]
    assert assign_split("fam", p, prov) == "heldout_function"
    assert assign_split("fam", p, _provenance(*kept)) == "train"
    assert assign_split("fam", p, _provenance(kept[0], kept[0])) == "train"


def test_family_splits_win_and_no_function_means_train():
    p = SplitParams(heldout_families=["hf"], regression_families=["rf"])
    assert assign_split("hf", p, _provenance(_fn(p, True, "hf"))) == "heldout"
    assert assign_split("rf", p, _provenance(_fn(p, True, "rf"))) == "regression"
    assert assign_split("fam", p, {"author": "x", "file": "pkg/mod.py"}) == "train"
    assert assign_split("fam", p, None) == "train"
    assert assign_split("fam", p, {"function": _fn(p, True)}) == "heldout_function"


def test_curation_assigns_the_function_split_to_an_authored_task(tmp_path):
    """The call site: a hand-authored task whose provenance names a held-out function."""
    from rlvr.enclave import Enclave
    from rlvr.authoring.authored import load_task_dir
    from rlvr.authoring.curation import CurationParams, curate_one
    from taskkit import write_task

    seed = next(s for s in range(1000)
                if is_heldout_function("mini", "clamp", SplitParams(seed=s)))
    task_dir = write_task(tmp_path)
    meta = yaml.safe_load((task_dir / "task.yaml").read_text())
    meta["provenance"] = {"file": "mini/core.py", "function": "clamp"}
    (task_dir / "task.yaml").write_text(yaml.safe_dump(meta))
    task = load_task_dir(task_dir)
    with Enclave(backend="bwrap", workers=1) as enclave:
        held = curate_one(task, enclave, CurationParams(
            reference_runs=1, max_mutants=0, split=SplitParams(seed=seed)))
        kept = curate_one(task, enclave, CurationParams(
            reference_runs=1, max_mutants=0, split=SplitParams(heldout_function_share=0.0)))
    assert held.split == "heldout_function", getattr(held, "detail", "")
    assert kept.split == "train"


# ---- hygiene --------------------------------------------------------------------------------
def _task(task_id, family, split, *, snapshot="s", hidden="h", reference="r") -> Task:
    return Task(task_id=task_id, family=family, instruction="fix it",
                repo_files={"pkg/mod.py": f"# {snapshot}\n"}, public_tests=(),
                hidden_tests={"test_h.py": f"# {hidden}\n"},
                reference_patch=f"--- {reference}\n", split=split)


def test_hygiene_accepts_train_and_heldout_function_in_one_family_sharing_the_suite():
    tasks = [_task("a", "fam", "train", snapshot="s1", reference="r1"),
             _task("b", "fam", "heldout_function", snapshot="s2", reference="r2"),
             _task("c", "other", "heldout", snapshot="s3", hidden="h3", reference="r3")]
    assert check_split_hygiene(tasks) == {"train": 1, "heldout_function": 1, "heldout": 1}


@pytest.mark.parametrize("field", ["snapshot", "reference"])
def test_hygiene_catches_a_function_tier_task_sharing_a_bug_with_train(field):
    distinct = {"snapshot": "s2", "reference": "r2", field: "same"}
    tasks = [_task("a", "fam", "train", **{"snapshot": "s1", "reference": "r1", field: "same"}),
             _task("b", "fam", "heldout_function", **distinct)]
    with pytest.raises(SplitLeak, match=rf"'b' \(heldout_function\) shares its {field}"):
        check_split_hygiene(tasks)


@pytest.mark.parametrize("other", ["heldout", "regression"])
def test_hygiene_still_catches_family_leaks(other):
    with pytest.raises(SplitLeak, match="appears in splits"):
        check_split_hygiene([_task("a", "fam", "train", snapshot="1", reference="1"),
                             _task("b", "fam", other, snapshot="2", reference="2")])
    with pytest.raises(SplitLeak, match="appears in splits"):
        check_split_hygiene([_task("a", "fam", "heldout_function", snapshot="1", reference="1"),
                             _task("b", "fam", other, snapshot="2", reference="2")])
    # A held-out family may not share even its hidden suite with train.
    with pytest.raises(SplitLeak, match=rf"'b' \({other}\) shares its hidden"):
        check_split_hygiene([_task("a", "fam", "train", snapshot="1", reference="1"),
                             _task("b", "fam2", other, snapshot="2", reference="2")])
